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
});
