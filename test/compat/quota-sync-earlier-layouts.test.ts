// v0.1.0's and v0.2.0's quota-sync scripts and the current one on the same keys: a rollback to v0.2.0, keys
// v0.2.0 wrote (b4, 50 ms spent buckets) and keys v0.1.0 wrote (b3) read and converted by the current script.
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import type { RedisQuotaStore } from "../../functions/adapters/redis-quota-store.ts";
import {
  encodeSync,
  type QuotaRule,
  quotaKey,
  type SyncRequest,
  slotGroupPrefix,
} from "../../sdk/src/protocol/index.ts";
import { connectCluster, uniqueNamespace } from "../support/cluster.ts";
import {
  approximateRule as approximate,
  syncCall as call,
  syncEntry as entry,
  strictRule as strict,
} from "../support/quota-sync-calls.ts";
import { TestClockQuotaStore } from "../support/quota-test-clock.ts";
import { T0 } from "../support/rules.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

/** v0.2.0's script (50 ms spent buckets), as a deploy rolled back would run it. */
const PREVIOUS = readFileSync(new URL("./v0.2.0/quota-sync-settle-lag.lua", import.meta.url), "utf8");

/** v0.1.0's script, of the b3 format (protocol 1: text arguments), to write b3 keys of any shape. */
const B3 = readFileSync(new URL("./v0.1.0/quota-sync.lua", import.meta.url), "utf8");

/** A store with the rule published as v1, and a way to publish the next versions. */
async function storeWith(rule: QuotaRule) {
  const namespace = uniqueNamespace();
  const store = new TestClockQuotaStore(cluster, namespace);
  await store.publish("api", rule, "v1", rule.slotGroups, 1);
  let version = 1;
  const change = async (next: QuotaRule) => {
    version += 1;
    await store.publish("api", next, `v${version}`, next.slotGroups, version);
  };
  const stateKey = (key: string) => quotaKey(slotGroupPrefix(namespace, "api", 0), key);
  const previous = async (request: SyncRequest, now: number) => {
    const { keys, args } = encodeSync(namespace, request, now);
    const reply = (await cluster.eval(PREVIOUS, keys.length, ...keys, ...args)) as unknown[];
    return { tokens: reply[8] as number, used: reply[12] as number };
  };
  /** One key's sync by the b3 script: usage and refunds as "at:count,..."; its reply's grant and windows. */
  const b3 = async (instance: string, seq: number, key: string, now: number, usage: string, want: number) => {
    const { keys } = encodeSync(namespace, call(instance || "r", seq, [entry(key)]), now);
    const args = [1, now, instance, seq, "v1", usage, "", want, want];
    const reply = (await cluster.eval(B3, keys.length, ...keys, ...args)) as unknown[];
    return { amount: reply[8] as number, used: reply.slice(12) as number[] };
  };
  return { store, change, stateKey, previous, b3 };
}

type Tokens = { tokens: number; used: number[]; denyUntil: number };
const tokensOf = (reply: Awaited<ReturnType<RedisQuotaStore["sync"]>>, i = 0): Tokens => {
  const e = reply.entries[i]!;
  if (e.mode !== "strict") throw new Error("expected a strict assignment");
  return { tokens: e.tokens, used: e.used, denyUntil: e.denyUntil };
};

describe("review 11: strict's W/100 spent buckets and keys under another layout", () => {
  // Suspicion made concrete (a deploy hazard more than this script's fault): the previous script drops a key
  // under another layout, and every strict key the new script wrote is under another layout for it (spent
  // buckets s1000/102, not s1000/21). A rollback within a window lets it admit up to max again.
  it.fails("a rollback to the previous script (50 ms spent buckets) keeps a strict key's counts: nothing beyond max", async () => {
    const { store, previous } = await storeWith(strict([{ windowMs: 1000, max: 10 }]));
    expect(tokensOf(await store.sync(call("x", 1, [entry("k", { want: 10 })]), T0 + 20)).tokens).toBe(10);
    await store.sync(call("x", 2, [entry("k", { usage: [[T0 + 20, 10]] })]), T0 + 30);
    // the deploy is rolled back at T0 + 100: the previous script answers y
    const rolledBack = await previous(call("y", 1, [entry("k", { want: 10 })]), T0 + 100);
    expect(rolledBack).toEqual({ tokens: 0, used: 10 });
  });

  it("a key of the previous script (b4, 50 ms spent buckets) read by this one and written back keeps its counts; a read converts nothing", async () => {
    const { store, previous, stateKey } = await storeWith(strict([{ windowMs: 1000, max: 10 }]));
    expect(await previous(call("x", 1, [entry("k", { want: 10 })]), T0 + 20)).toMatchObject({ tokens: 10 });
    await previous(call("x", 2, [entry("k", { usage: [[T0 + 20, 4]] })]), T0 + 30);
    expect(await cluster.hget(stateKey("k"), "L")).toBe("b4|strict,g1000/22,s1000/21");
    const read = await store.read(call("", 0, [entry("k")]), T0 + 40);
    expect(read.entries[0]!.used).toEqual([10]);
    expect(await cluster.hget(stateKey("k"), "L")).toBe("b4|strict,g1000/22,s1000/21");
    // converted by y's sync: 6 granted and 4 spent still count, nothing more is granted
    expect(tokensOf(await store.sync(call("y", 1, [entry("k", { want: 10 })]), T0 + 50))).toMatchObject({
      tokens: 0,
      used: [10],
    });
    expect(await cluster.hget(stateKey("k"), "L")).toBe("b4|strict,g1000/22,s1000/102");
    // x spends its 6 (of the old layout's grant) at T0 + 60: over-counted, never under
    await store.sync(call("x", 3, [entry("k", { usage: [[T0 + 20, 6]] })]), T0 + 60);
    for (const [i, t] of [100, 900, 1059].entries()) {
      expect(tokensOf(await store.sync(call("y", i + 2, [entry("k", { want: 10 })]), T0 + t)).tokens).toBe(0);
    }
  });

  it("keys the b3 script wrote, of several shapes (two strict limits, 2 s strict, three approximate windows, a 10 s strict one), keep at least what each window held", async () => {
    const rules = [
      strict(
        [
          { windowMs: 1000, max: 10 },
          { windowMs: 60_000, max: 30 },
        ],
        50,
      ),
      strict([{ windowMs: 2000, max: 10 }], 200),
      approximate([
        { windowMs: 1000, max: 10 },
        { windowMs: 2000, max: 15 },
        { windowMs: 60_000, max: 40 },
      ]),
      strict([{ windowMs: 10_000, max: 10 }], 200),
    ];
    for (const rule of rules) {
      const { store, stateKey, b3 } = await storeWith(rule);
      const granted = await b3("x", 1, "k", T0, "", 10);
      expect(granted.amount).toBeGreaterThan(0);
      // strict: 4 of the grant spent (at its grant time); approximate: 4 used at T0 + 30
      const usage = rule.mode === "strict" ? `${T0}:4` : `${T0 + 30}:4`;
      await b3("x", 2, "k", T0 + 30, usage, 0);
      await b3("x", 3, "k", T0 + 140, "", 3);
      const before = await b3("", 0, "k", T0 + 150, "", 0);
      expect((await cluster.hget(stateKey("k"), "L"))?.startsWith("b3|")).toBe(true);
      const read = (await store.read(call("", 0, [entry("k")]), T0 + 150)).entries[0]!.used;
      const converted = (await store.sync(call("y", 1, [entry("k")]), T0 + 150)).entries[0]!.used;
      expect(await cluster.hget(stateKey("k"), "L")).toMatch(/^b4\|/);
      for (const [j, used] of before.used.entries()) {
        expect([rule.mode, j, read[j]! >= used, converted[j]! >= used]).toEqual([rule.mode, j, true, true]);
      }
    }
  });
});
