// The caps and retentions a cap-sends call carries (ARGV[7], ARGV[8]) are those of its users' profiles, in
// the call's order, however they are packed (each profile is packed once and reused).
import { decode } from "@msgpack/msgpack";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { planCapSends, type ScriptProfile } from "../../../functions/core/capping/cap-sends-script.ts";

const profileArbitrary = fc.record({
  caps: fc.array(
    fc.record({
      windowMs: fc.integer({ min: 1, max: 2 ** 40 }),
      max: fc.integer({ min: 0, max: 10_000 }),
      everyChannel: fc.boolean(),
    }),
    { maxLength: 32 },
  ),
  retentionMs: fc.integer({ min: 1, max: 2 ** 40 }),
  windowRetentionMs: fc.integer({ min: 1, max: 2 ** 40 }),
});

describe("cap-sends call arguments", () => {
  it("carry the profiles of the call's users, in the call's order, packed as msgpack", () => {
    fc.assert(
      fc.property(
        fc.array(profileArbitrary, { minLength: 1, maxLength: 20 }),
        fc.array(fc.nat(), { minLength: 1, maxLength: 40 }),
        (profiles: ScriptProfile[], picks) => {
          // users of one page each, so one call; each user of a profile picked at random
          const segmentOf = Uint8Array.from(picks, (pick) => pick % profiles.length);
          const sortedIds = Uint32Array.from(picks, (_, i) => i);
          const request = {
            namespace: "t",
            now: 1,
            at: 1,
            mode: "count" as const,
            channel: "push",
            campaignId: "",
            forced: false,
            horizonMs: 1,
            profiles,
            sortedIds,
            segmentOf,
          };
          // twice: the second call reuses the packed profiles of the first
          for (const [call] of [planCapSends(request), planCapSends(request)]) {
            if (!call) throw new Error("no call planned");
            const order = [...new Set(segmentOf)];
            const expected = order.map((segment) => profiles[segment] as ScriptProfile);
            expect(decode(call.args[6] as Buffer)).toEqual(
              expected.map((p) => [
                p.caps.map((cap) => cap.windowMs),
                p.caps.map((cap) => cap.max),
                p.caps.map((cap) => (cap.everyChannel ? 1 : 0)),
              ]),
            );
            expect(call.args[7]).toBe(expected.map((p) => `${p.retentionMs}:${p.windowRetentionMs}`).join(","));
          }
        },
      ),
      { numRuns: 100 },
    );
  });

  it("carry a profile that differs from an earlier one of the call only by its periods as [that one's number, its periods]", () => {
    const cap = (windowMs: number, max: number, period?: number[]) => ({
      windowMs,
      max,
      everyChannel: false,
      ...(period ? { period } : {}),
    });
    const profile = (caps: ReturnType<typeof cap>[]): ScriptProfile => ({
      caps,
      retentionMs: 100,
      windowRetentionMs: 90,
    });
    // three zones' periods of one segment's calendar caps, and a segment of other caps with periods
    const profiles = [
      profile([cap(60, 1), cap(86_400_000, 1, [0, 10])]),
      profile([cap(60, 1), cap(86_400_000, 1, [5, 15])]),
      profile([cap(60, 2), cap(86_400_000, 1, [5, 15])]),
      profile([cap(60, 1), cap(86_400_000, 1, [7, 17])]),
    ];
    const sortedIds = Uint32Array.from({ length: 4 }, (_, i) => i);
    const [call] = planCapSends({
      namespace: "t",
      now: 1,
      at: 1,
      mode: "count",
      channel: "push",
      campaignId: "",
      forced: false,
      horizonMs: 1,
      profiles,
      sortedIds,
      segmentOf: Uint8Array.of(0, 1, 2, 3),
    });
    const caps = (p: ScriptProfile) => [
      p.caps.map((c) => c.windowMs),
      p.caps.map((c) => c.max),
      p.caps.map(() => 0),
      null,
      p.caps.map((c) => c.period ?? []),
    ];
    expect(decode(call?.args[6] as Buffer)).toEqual([
      caps(profiles[0] as ScriptProfile),
      [0, [[], [5, 15]]],
      caps(profiles[2] as ScriptProfile),
      [0, [[], [7, 17]]],
    ]);
    // a later call where the same profiles come in another order: each travels by its earlier profile's
    // number in that call (the packed [number, periods] kept from the first call are not reused for another)
    const [later] = planCapSends({
      namespace: "t",
      now: 1,
      at: 1,
      mode: "count",
      channel: "push",
      campaignId: "",
      forced: false,
      horizonMs: 1,
      profiles,
      sortedIds,
      segmentOf: Uint8Array.of(2, 3, 0, 1),
    });
    expect(decode(later?.args[6] as Buffer)).toEqual([
      caps(profiles[2] as ScriptProfile),
      caps(profiles[3] as ScriptProfile),
      [1, [[], [0, 10]]],
      [1, [[], [5, 15]]],
    ]);
  });
});
