// quota-sync's time from the store (lua/quota-sync/store-now.lua, bounded in store-time.lua) and the quiet time of a rule restored
// after a loss (lua/quota-rule.lua), on the real cluster. Times near the store's clock are read from it
// (TIME), never from the calendar; the bounds are shown on the test build, whose store clock the test sets.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { RedisQuotaStore } from "../../../functions/adapters/redis-quota-store.ts";
import { lossQuietMs } from "../../../functions/core/quotas/quota-rule-script.ts";
import { type QuotaStateLoss, QuotaSyncService } from "../../../functions/core/quotas/quota-sync-service.ts";
import { slotGroupKeys } from "../../../sdk/src/protocol/index.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { syncCall as call, syncEntry as entry, strictRule } from "../../support/quota-sync-calls.ts";
import { TestClockQuotaStore } from "../../support/quota-test-clock.ts";
import { T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

const rule = strictRule([{ windowMs: 1_000, max: 10 }], 200);

/** The store's clock (ms), read from the node. */
async function storeTime(): Promise<number> {
  const [seconds, micros] = await cluster.time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

async function published() {
  const namespace = uniqueNamespace();
  const store = new RedisQuotaStore(cluster, namespace);
  await store.publish("api", rule, "v1", 1, 1);
  return store;
}

/** The rule published on the test build: the store's clock is what the test sets (`storeNow`). */
async function publishedOnTestClock() {
  const store = new TestClockQuotaStore(cluster, uniqueNamespace());
  await store.publish("api", rule, "v1", 1, 1);
  return store;
}

const tokens = (reply: Awaited<ReturnType<RedisQuotaStore["sync"]>>) => {
  const e = reply.entries[0]!;
  return { tokens: e.mode === "strict" ? e.tokens : -1, denyUntil: e.denyUntil, serverTime: reply.serverTime };
};

describe("quota-sync's time", () => {
  it("a caller whose clock is 5 s ahead of the store counts as the store's time", async () => {
    const store = await published();
    const before = await storeTime();
    const reply = await store.sync(call("a", 1, [entry("k", { want: 1 })]), before + 5_000);
    const after = await storeTime();
    expect(reply.serverTime).toBeGreaterThanOrEqual(before);
    expect(reply.serverTime).toBeLessThanOrEqual(after);
  });

  it("a caller whose clock is 2 s behind the store counts as 10 ms behind it (the bound), so it cannot start a group's time back", async () => {
    const store = await publishedOnTestClock();
    store.storeNow = T0 + 2_000;
    expect((await store.sync(call("a", 1, [entry("k", { want: 1 })]), T0)).serverTime).toBe(T0 + 1_990);
    // within the bound the caller's own clock is taken
    store.storeNow = T0 + 2_050;
    expect((await store.sync(call("b", 1, [entry("k")]), T0 + 2_043)).serverTime).toBe(T0 + 2_043);
  });

  it("an instance whose clock steps back 1 s goes on from the time it had, never back", async () => {
    const store = await publishedOnTestClock();
    store.storeNow = T0 + 1_000;
    await store.sync(call("a", 1, [entry("k", { want: 1 })]), T0 + 1_000);
    // 5 ms later on the store's clock, the instance's clock 980 ms back: within the bound, the time it had
    store.storeNow = T0 + 1_005;
    const reply = await store.sync(call("a", 2, [entry("k")]), T0 + 20);
    expect(reply.serverTime).toBe(T0 + 1_000);
    // and moves on from there as its clock moves
    store.storeNow = T0 + 1_055;
    expect((await store.sync(call("a", 3, [entry("k")]), T0 + 70)).serverTime).toBe(T0 + 1_050);
  });

  it("a caller behind the slot group's latest time counts as that time (another instance moved it)", async () => {
    const store = await publishedOnTestClock();
    store.storeNow = T0 + 1_000;
    await store.sync(call("a", 1, [entry("k", { want: 1 })]), T0 + 1_000);
    // b's clock 4 ms behind a's, inside the bound: the group's latest time
    store.storeNow = T0 + 1_002;
    expect((await store.sync(call("b", 1, [entry("k")]), T0 + 996)).serverTime).toBe(T0 + 1_000);
    // 600 ms behind: held to the bound, then to the latest time
    expect((await store.sync(call("c", 1, [entry("k")]), T0 + 400)).serverTime).toBe(T0 + 1_000);
  });
});

describe("a rule restored after a loss", () => {
  it("where no configuration was, grants nothing new until its quiet time ends, then grants again", async () => {
    const namespace = uniqueNamespace();
    const store = new RedisQuotaStore(cluster, namespace);
    expect(await store.restore("api", rule, "v1", 2, 1, 400)).toEqual([0, 1]);
    const start = await storeTime();
    const quiet = tokens(await store.sync(call("a", 1, [entry("k", { want: 5 })]), start));
    expect(quiet.tokens).toBe(0);
    expect(quiet.denyUntil).toBeGreaterThan(quiet.serverTime);
    expect(quiet.denyUntil).toBeLessThanOrEqual(start + 400);
    const wait = Math.max(0, quiet.denyUntil - (await storeTime())) + 20;
    await new Promise((resolve) => setTimeout(resolve, wait));
    expect(tokens(await store.sync(call("a", 2, [entry("k", { want: 5 })]), await storeTime())).tokens).toBe(5);
  });

  it("over a configuration still there: a plain write, no quiet time, no loss reported", async () => {
    const store = await published();
    expect(await store.restore("api", rule, "v1", 1, 1, 60_000)).toEqual([]);
    expect(tokens(await store.sync(call("a", 1, [entry("k", { want: 5 })]), await storeTime())).tokens).toBe(5);
  });
});

describe("the sync route when the store lost the rule", () => {
  it("restores it from the policy at once, reports the loss once, and the restored group grants nothing new until the quiet time ends", async () => {
    const namespace = uniqueNamespace();
    const losses: QuotaStateLoss[] = [];
    const quotas = new Map([["api", { rule, version: "p1.api" }]]);
    const service = new QuotaSyncService({
      store: new RedisQuotaStore(cluster, namespace),
      rules: async () => ({ quotas, stamp: 1 }),
      clock: { now: () => Date.now() },
      onStateLost: (loss) => losses.push(loss),
    });
    const body = (seq: number) => ({
      instanceId: "a",
      rule: "api",
      group: 0,
      seq,
      configVersion: "p1.api",
      entries: [{ key: "k", usage: [], refunds: [], offered: 1, want: 5 }],
    });
    expect(tokens(await service.sync(body(1))).tokens).toBe(5);
    expect(losses).toEqual([]);
    // the slot group's state gone, as after FLUSHALL on its node
    const group = slotGroupKeys(namespace, "api", 0);
    await cluster.del(group.config, group.sequences, group.instances);
    const after = await service.sync(body(2));
    expect(after.status).toBe("applied");
    expect(tokens(after).tokens).toBe(0);
    expect(tokens(after).denyUntil).toBeGreaterThan(after.serverTime);
    expect(losses).toEqual([{ rule: "api", groups: [0], quietMs: lossQuietMs(rule), seenBy: "sync" }]);
    // the next sync is served as usual (no second loss), still quiet
    expect(tokens(await service.sync(body(3))).tokens).toBe(0);
    expect(losses).toHaveLength(1);
  });
});
