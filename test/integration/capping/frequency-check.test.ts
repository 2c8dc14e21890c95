// POST /v1/frequency's engine method (Capper.checkUser) against docs/api.md ("Check API") and
// docs/api.md: peeks change nothing, a campaign ID gives a campaign send's identity, anonymous checks all
// count, and a capped answer's retryAfterMs is a time at which the same check has room.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { rulesOf, T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
let store: RedisCapStore;
beforeAll(() => {
  cluster = connectCluster();
  store = new RedisCapStore(cluster);
});
afterAll(async () => {
  await cluster.quit();
});

const SECOND = 1_000;
function setup(caps: Record<string, { window: string; max: number }[]>) {
  const clock = fixedClock(T0);
  const rules = rulesOf({
    version: "v",
    channels: ["a", "b"],
    segments: [{ name: "s", bitmap: "segments/s.roaring", caps }],
    default: { name: "rest", caps },
  });
  return { clock, capper: new Capper({ store, rules: () => rules, clock, namespace: uniqueNamespace() }) };
}

describe("review: /v1/frequency (Capper.checkUser)", () => {
  it("peeks without counting, counts every anonymous consuming check, and is allowed again at now + retryAfterMs", async () => {
    // repro: a:3/1m; peek x2, 3 anonymous checks 10 s apart allowed, the 4th capped; at now + retryAfterMs allowed
    const { clock, capper } = setup({ a: [{ window: "1m", max: 3 }] });
    const user = 4_000_000_000;
    for (let i = 0; i < 2; i++) {
      expect(await capper.checkUser({ userId: user, channel: "a", consume: false })).toMatchObject({
        allowed: true,
        windows: [{ used: 0, remaining: 3 }],
      });
    }
    for (let i = 0; i < 3; i++) {
      expect((await capper.checkUser({ userId: user, channel: "a" })).decision).toBe("allowed");
      clock.advance(10 * SECOND);
    }
    const capped = await capper.checkUser({ userId: user, channel: "a" });
    expect(capped).toMatchObject({ allowed: false, decision: "capped", windows: [{ used: 3, remaining: 0 }] });
    const retry = capped.retryAfterMs as number;
    expect(retry).toBeGreaterThanOrEqual(1);
    clock.advance(retry - 1);
    expect((await capper.checkUser({ userId: user, channel: "a", consume: false })).allowed).toBe(false);
    clock.advance(1);
    expect((await capper.checkUser({ userId: user, channel: "a" })).decision).toBe("allowed");
  });

  it("gives a check with a campaign ID the campaign send's identity: after the batch it is a duplicate, not counted", async () => {
    // repro: a:2/1h; capBatch {k1,a,[5]}; checkUser {5,a,k1} -> duplicate (used 1); checkUser {5,a} -> allowed (used 2)
    const { capper } = setup({ a: [{ window: "1h", max: 2 }] });
    await capper.capBatch({ campaignId: "k1", channel: "a", userIds: [5] });
    expect(await capper.checkUser({ userId: 5, channel: "a", campaignId: "k1" })).toMatchObject({
      allowed: true,
      decision: "duplicate",
      windows: [{ used: 1, remaining: 1 }],
    });
    expect(await capper.checkUser({ userId: 5, channel: "a" })).toMatchObject({
      allowed: true,
      decision: "allowed",
      windows: [{ used: 2, remaining: 0 }],
    });
    expect((await capper.capBatch({ campaignId: "k2", channel: "a", userIds: [5] })).decisions[0]?.decision).toBe(
      "capped",
    );
  });
});
