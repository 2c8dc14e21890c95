// A denied sliding-log request on a long log: its retry time is the first counted entry whose cumulative cost
// reaches what must age out (a binary search, lua/sliding-log.lua), exact at every size and cost.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisLimitStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Limiter } from "../../../functions/core/limits/limiter.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";

const MINUTE = 60_000;
const DAY = 24 * 60 * MINUTE;
/** A midnight UTC a day or two ahead of the server's clock: the log lives through the test. */
const T = Math.ceil((Date.now() + DAY) / DAY) * DAY;

let cluster: TollgateCluster;
let limiter: Limiter;
beforeAll(() => {
  cluster = connectCluster();
  const store = new RedisLimitStore(cluster, { deadlineMs: 5_000 });
  limiter = new Limiter({ store, clock: fixedClock(T + MINUTE), namespace: uniqueNamespace() });
});
afterAll(async () => {
  await cluster.quit();
});

describe("a sliding log of 20,000 entries", () => {
  const log = { key: "long", algorithm: "sliding-log", max: 30_000, windowMs: MINUTE } as const;
  // entry i at T + i costs 1, except every 10th, which costs 2: 22,000 counted
  const costOf = (i: number) => (i % 10 === 0 ? 2 : 1);
  beforeAll(async () => {
    for (let from = 0; from < 20_000; from += 1000) {
      await Promise.all(
        Array.from({ length: 1000 }, (_, j) => limiter.check({ ...log, cost: costOf(from + j), at: T + from + j })),
      );
    }
  });

  it.each([8_001, 15_000, 22_000, 30_000])("denies a cost of %i and names the exact retry time", async (cost) => {
    const at = T + 19_999;
    const need = 22_000 + cost - 30_000;
    // the first entry at which the charges from the oldest add up to `need`
    let sum = 0;
    let first = 0;
    while (sum + costOf(first) < need) sum += costOf(first++);
    const denied = await limiter.check({ ...log, cost, at });
    expect(denied).toMatchObject({ allowed: false, remaining: 8_000, retryAfterMs: T + first + MINUTE - at });
    // and passes then, not a millisecond before (peeked with the same cost)
    const before = await limiter.check({ ...log, cost, at: at + (denied.retryAfterMs as number) - 1 });
    expect(before.allowed).toBe(false);
  });
});
