// quota-sync's time from the store (lua/quota-sync/store-time.lua) and the quiet time of a rule restored
// after a loss (lua/quota-rule.lua), on the real cluster. Times near the store's clock are read from it
// (TIME), never from the calendar.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { RedisQuotaStore } from "../../../functions/adapters/redis-quota-store.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { syncCall as call, syncEntry as entry, strictRule } from "../../support/quota-sync-calls.ts";
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

  it("an instance whose clock steps back 1 s goes on from the time it had, never back", async () => {
    const store = await published();
    await store.sync(call("a", 1, [entry("k", { want: 1 })]), T0 + 1_000);
    const reply = await store.sync(call("a", 2, [entry("k")]), T0 + 20);
    expect(reply.serverTime).toBe(T0 + 1_000);
    // and moves on from there as its clock moves
    expect((await store.sync(call("a", 3, [entry("k")]), T0 + 70)).serverTime).toBe(T0 + 1_050);
  });

  it("a caller behind the slot group's latest time counts as that time (another instance moved it)", async () => {
    const store = await published();
    await store.sync(call("a", 1, [entry("k", { want: 1 })]), T0 + 1_000);
    expect((await store.sync(call("b", 1, [entry("k")]), T0 + 400)).serverTime).toBe(T0 + 1_000);
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
