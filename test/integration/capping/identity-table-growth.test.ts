// The tag's identity table under a new campaign ID per check: it stops growing once IDs leave the kept time.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { DEFAULT_REDELIVERY_MS, keptMs } from "../../../functions/core/capping/policy.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { capIdentityKey, capTagOf } from "../../../sdk/src/protocol/index.ts";
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

describe("review: the tag's identity table under a new campaign ID per check (review3 defect, fixed)", () => {
  it("stops growing once campaign IDs leave the kept time, and drops those that did", async () => {
    const rules = rulesOf({
      version: "v",
      channels: ["a"],
      segments: [],
      default: { name: "rest", caps: { a: [{ window: "1m", max: 5 }] } },
    });
    // what the default caps keep is under an hour, so the second half of the run sees no more live identities
    expect(keptMs(rules.policy, 0, DEFAULT_REDELIVERY_MS)).toBeLessThan(60 * 60_000);
    const clock = fixedClock(T0);
    const namespace = uniqueNamespace();
    const capper = new Capper({ store, rules: () => rules, clock, namespace });
    const table = capIdentityKey(namespace, capTagOf(1_000));
    // 20 users of one tag, one check every 24 s for 192 minutes, each with its own campaign ID
    const sizes: number[] = [];
    for (let i = 0; i < 480; i++) {
      clock.advance(24_000);
      const check = await capper.checkUser({ userId: 1_000 + (i % 20), channel: "a", campaignId: `msg-${i}` });
      expect(check.decision).toBe("allowed");
      if (i % 60 === 59) sizes.push(await cluster.hlen(table));
    }
    expect(await cluster.hexists(table, "i:a:msg-0")).toBe(0);
    // a table that kept every identity would double from the first half to the second
    const half = sizes.length / 2;
    expect(Math.max(...sizes.slice(half))).toBeLessThanOrEqual(1.5 * Math.max(...sizes.slice(0, half)));
  }, 60_000);
});
