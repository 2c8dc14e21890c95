// POST /v1/frequency's engine method (Capper.checkUser) under quiet hours: a check inside them says no with
// reason quiet_hours and the instant they end in the user's zone, counts nothing, and the same check at that
// instant is allowed and counts. Zones come from the zone bitmaps, everyone else from defaultZone.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { buildSegments } from "../../../functions/core/capping/segment-builder.ts";
import { parseBitmap, ZoneIndex } from "../../../functions/core/capping/segment-index.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { ZoneOverlapError } from "../../../functions/core/shared/errors.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { HOUR, rulesOf, T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
let store: RedisCapStore;
beforeAll(() => {
  cluster = connectCluster();
  store = new RedisCapStore(cluster);
});
afterAll(async () => {
  await cluster.quit();
});

/** Users 1-9 live in Paris (zone bitmap), everyone else in Tokyo (defaultZone); quiet 21:00-08:00 on push. */
function setup() {
  const clock = fixedClock(T0);
  const rules = rulesOf({
    version: "quiet",
    channels: ["push", "email"],
    segments: [],
    default: { name: "everyone", caps: { push: [{ window: "1d", max: 1 }] } },
    defaultZone: "Asia/Tokyo",
    zones: ["Europe/Paris"],
    quietHours: { push: [{ from: "21:00", to: "08:00" }] },
  });
  const bytes = buildSegments([{ name: "paris", userIds: [1, 2, 3, 4, 5, 6, 7, 8, 9] }]).get("paris") as Uint8Array;
  const zones = new ZoneIndex([parseBitmap(bytes, "zones/Europe/Paris.roaring")], ["Europe/Paris"]);
  const capper = new Capper({ store, rules: () => ({ ...rules, zones }), clock, namespace: uniqueNamespace() });
  return { clock, capper };
}

describe("/v1/frequency under quiet hours (Capper.checkUser)", () => {
  it("says quiet_hours with the instant the user's night ends, counts nothing, and allows the check then", async () => {
    const { clock, capper } = setup();
    // T0 + 12 h is 21:00 in Tokyo: quiet until 08:00 there, T0 + 23 h
    clock.set(T0 + 12 * HOUR);
    const quiet = await capper.checkUser({ userId: 100, channel: "push", campaignId: "q1" });
    expect(quiet).toEqual({
      allowed: false,
      decision: "quiet",
      segment: "everyone",
      reason: "quiet_hours",
      eligibleAt: T0 + 23 * HOUR,
      windows: [{ channel: "push", window: "1d", max: 1, used: 0, remaining: 1, resetAt: T0 + 12 * HOUR }],
    });
    // nothing was counted: at the instant the night ends the same check is allowed, and counts
    clock.set(T0 + 23 * HOUR);
    expect(await capper.checkUser({ userId: 100, channel: "push", campaignId: "q1" })).toMatchObject({
      allowed: true,
      decision: "allowed",
      windows: [{ used: 1, remaining: 0 }],
    });
    // quiet hours are per channel: email has none
    clock.set(T0 + 12 * HOUR);
    expect((await capper.checkUser({ userId: 100, channel: "email" })).allowed).toBe(true);
  });

  it("reads the user's zone from its bitmap: Paris is at 13:00 when Tokyo is at 21:00", async () => {
    const { clock, capper } = setup();
    clock.set(T0 + 12 * HOUR);
    expect(await capper.checkUser({ userId: 5, channel: "push", consume: false })).toMatchObject({ allowed: true });
    // 21:00 in Paris (UTC+1 in November) is T0 + 20 h: quiet until 08:00 Paris, T0 + 31 h
    clock.set(T0 + 20 * HOUR);
    expect(await capper.checkUser({ userId: 5, channel: "push", consume: false })).toMatchObject({
      allowed: false,
      reason: "quiet_hours",
      eligibleAt: T0 + 31 * HOUR,
    });
  });

  it("refuses two zone bitmaps that share a user, naming both", () => {
    const bitmaps = buildSegments([
      { name: "a", userIds: [1, 2] },
      { name: "b", userIds: [3] },
    ]);
    const paris = parseBitmap(bitmaps.get("a") as Uint8Array, "a");
    const overlapping = parseBitmap(bitmaps.get("a") as Uint8Array, "b");
    expect(() => new ZoneIndex([paris, overlapping], ["Europe/Paris", "Europe/Rome"])).toThrow(ZoneOverlapError);
    expect(() => new ZoneIndex([paris, overlapping], ["Europe/Paris", "Europe/Rome"])).toThrow(
      "zones/Europe/Paris.roaring and zones/Europe/Rome.roaring share 2 users",
    );
  });
});
