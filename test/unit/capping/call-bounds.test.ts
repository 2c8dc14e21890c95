// How a cap-sends call is bounded beyond its users and keys: a "+windows" call by its users × caps (a capped
// user's retry time costs per cap), any call by its profiles × caps (a page decides each profile's history on
// its own). Every user is still planned exactly once.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  MAX_PROFILE_CAPS_PER_CALL,
  MAX_WINDOW_CAPS_PER_CALL,
  planCapSends,
  type ScriptProfile,
} from "../../../functions/core/capping/cap-sends-script.ts";

const profileWith = (caps: number, n: number): ScriptProfile => ({
  caps: Array.from({ length: caps }, (_, i) => ({ windowMs: 3_600_000 * (i + 1) + n, max: 3, everyChannel: false })),
  retentionMs: 40 * 3_600_000,
  windowRetentionMs: 40 * 3_600_000,
});

function request(profiles: ScriptProfile[], segmentOf: Uint8Array, withWindows: boolean) {
  return {
    namespace: "t",
    now: 1,
    at: 1,
    mode: withWindows ? ("peek" as const) : ("count" as const),
    withWindows,
    channel: "push",
    campaignId: "c",
    forced: false,
    horizonMs: 1,
    profiles,
    // one tag: users 0..n-1 are consecutive pages of one slot
    sortedIds: Uint32Array.from(segmentOf, (_, i) => i),
    segmentOf,
  };
}

/** Each planned member exactly once, across the calls. */
function expectEveryUserOnce(calls: ReturnType<typeof planCapSends>, users: number) {
  const members = calls.flatMap((call) => call.members).sort((a, b) => a - b);
  expect(members).toEqual(Array.from({ length: users }, (_, i) => i));
}

describe("cap-sends call bounds", () => {
  it("a +windows call holds at most MAX_WINDOW_CAPS_PER_CALL / caps users", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 32 }), fc.integer({ min: 1, max: 1_024 }), (caps, users) => {
        const profiles = [profileWith(caps, 0)];
        const calls = planCapSends(request(profiles, new Uint8Array(users), true));
        const most = Math.max(1, Math.floor(MAX_WINDOW_CAPS_PER_CALL / caps));
        for (const call of calls) expect(call.members.length).toBeLessThanOrEqual(most);
        expectEveryUserOnce(calls, users);
      }),
      { numRuns: 60 },
    );
  });

  it("a counting call without +windows keeps its 1,024 users when they share a profile", () => {
    const calls = planCapSends(request([profileWith(32, 0)], new Uint8Array(1_024), false));
    expect(calls.map((call) => call.members.length)).toEqual([1_024]);
  });

  it("a call holds at most MAX_PROFILE_CAPS_PER_CALL / caps profiles, however its pages mix them", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 32 }),
        fc.integer({ min: 1, max: 256 }),
        fc.array(fc.nat(), { minLength: 1, maxLength: 1_024 }),
        (caps, count, picks) => {
          const profiles = Array.from({ length: count }, (_, n) => profileWith(caps, n));
          const segmentOf = Uint8Array.from(picks, (pick) => pick % count);
          const calls = planCapSends(request(profiles, segmentOf, false));
          const most = Math.max(1, Math.floor(MAX_PROFILE_CAPS_PER_CALL / caps));
          for (const call of calls) {
            expect(new Set(call.members.map((m) => segmentOf[m])).size).toBeLessThanOrEqual(most);
          }
          expectEveryUserOnce(calls, picks.length);
        },
      ),
      { numRuns: 60 },
    );
  });
});
