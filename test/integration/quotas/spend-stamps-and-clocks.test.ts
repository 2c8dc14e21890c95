// Strict spend stamps (spentAgo) against lua/quota-sync/ on the real cluster: what the
// store does with a stamp from a caller whose clock is a few ms behind the ring, and with stamps a
// client should never send (replays, mixed entry lengths, ages beyond the window or the store's now).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { RedisQuotaStore } from "../../../functions/adapters/redis-quota-store.ts";
import type { QuotaRule, SyncEntry, SyncReply, SyncRequest } from "../../../sdk/src/protocol/index.ts";
import { syncRequestSchema } from "../../../sdk/src/protocol/index.ts";
import { createQuotas, type Quotas } from "../../../sdk/src/quotas.ts";
import { redisTransport } from "../../../sdk/src/transports/redis.ts";
import { maxInWindow, neverScheduler } from "../../../sdk/test/support/quota-fixtures.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { publishedQuotaStore, syncCall, syncEntry } from "../../support/quota-sync-calls.ts";
import { T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

const rule: QuotaRule = {
  mode: "strict",
  leaseMs: 200,
  fallback: "deny",
  slotGroups: 1,
  limits: [{ windowMs: 1000, max: 10 }],
};

const store = () => publishedQuotaStore(cluster, rule);
const entry = (fields: Partial<SyncEntry> = {}) => syncEntry("k", fields);
const call = (instanceId: string, seq: number, e: SyncEntry) => syncCall(instanceId, seq, [e]);

function tokens(reply: SyncReply): number {
  const a = reply.entries[0];
  if (a?.mode !== "strict") throw new Error("expected a strict assignment");
  return a.tokens;
}

function used(reply: SyncReply): number {
  return reply.entries[0]!.used[0]!;
}

/**
 * Instance A's clock runs 5 ms behind B's (well within a 50 ms bucket). Real times (B's clock = real):
 * A is granted the whole limit at real T0+960, spends all 10 at real T0+1000.2 (the first 0.2 ms of
 * bucket 20), observes them at real T0+1000.5 and reports them at its next tick, real T0+1030, with
 * spentAgo floor(29.5) = 29, which the SDK's redisTransport sends with A's own now (T0+1025). B asks at
 * real T0+2000. Returns B's grant; B spends it at once, so A's 10 and B's land in [T0+1000.2, T0+2000.2).
 */
async function skewed(stamped: boolean): Promise<{ b: number; bUsedBefore: number }> {
  const s = await store();
  const skew = 5;
  const grant = await s.sync(call("a", 1, entry({ want: 10, offered: 10 })), T0 + 960 - skew);
  expect(tokens(grant)).toBe(10);
  const grantedAt = grant.serverTime;
  const report = entry({ usage: [[grantedAt, 10]], ...(stamped ? { spentAgo: [29] } : {}) });
  await s.sync(call("a", 2, report), T0 + 1030 - skew);
  // what the window holds just before B asks (a read: nothing applied)
  const peek = await s.read(call("r", 1, entry()), T0 + 2000);
  const b = await s.sync(call("b", 1, entry({ want: 10, offered: 10 })), T0 + 2000);
  return { b: tokens(b), bUsedBefore: used(peek) };
}

/**
 * Two SDK instances on the direct transport, A's wall clock 5 ms behind B's (both read Date.now()-like whole
 * ms; the monotonic clock is the real time, fractional as performance.now()). A is granted the whole limit,
 * spends it at real T0+1000.5 and (`observe`) notes it then; its next round, at real T0+1030, reports it.
 * B asks at real T0+2000 and spends what it gets at once. Returns every admission's real time.
 */
async function twoInstances(observe: boolean): Promise<number[]> {
  const namespace = uniqueNamespace();
  await new RedisQuotaStore(cluster, namespace).publish("api", rule, "v1", 1, 1);
  let real = T0 + 850;
  const make = (behind: number) =>
    createQuotas({
      transport: redisTransport({ redis: cluster, namespace }),
      clock: { now: () => Math.floor(real) - behind, monotonic: () => real },
      scheduler: neverScheduler,
      rules: { api: rule },
    });
  const a = make(5);
  const b = make(0);
  a.resolve("api", "k");
  b.resolve("api", "k");
  const admitted: number[] = [];
  const admit = (q: Quotas, n: number) => {
    for (let i = 0; i < n; i++) if (q.check("api", "k").allowed) admitted.push(real);
  };
  await a.sync();
  admit(a, 40); // demand (no token yet)
  real = T0 + 900;
  await a.sync(); // A asks for its rate and gets the whole limit
  real = T0 + 1000.5;
  admit(a, 40);
  expect(admitted).toHaveLength(10);
  if (observe) a.observe(); // the observer timer, on time
  real = T0 + 1030;
  await a.sync(); // the report: spentAgo 29 with the observation, none without
  real = T0 + 1950;
  await b.sync();
  admit(b, 40);
  real = T0 + 2000;
  await b.sync();
  admit(b, 40);
  return admitted;
}

describe("review10: spend stamps and callers' clocks (lua/quota-sync.lua)", () => {
  it("SDK, two instances 5 ms apart, spends not observed (dated at the report, as on Lambda): at most L in any window", async () => {
    const admitted = await twoInstances(false);
    expect(maxInWindow(admitted, 1000)).toBeLessThanOrEqual(10);
  });

  // The same contract as the store-level test below (docs/quotas.md: strict "L, exactly", in any window of
  // W; docs/decisions/0045-strict-exactness-and-spend-stamps.md: "exactness assumes callers' clocks agree within 10 ms"), end to end: the SDK's
  // observation dates A's spends at its own now (T0+1025 on A's clock) less 29, bucket 19, while they were
  // made in bucket 20 by B's clock and in real time; B is granted again at T0+2000 and the window
  // [T0+1000.5, T0+2000.5) holds A's 10 and B's grant.
  it("SDK, two instances 5 ms apart, spends observed between ticks: at most L in any window", async () => {
    const admitted = await twoInstances(true);
    expect(maxInWindow(admitted, 1000)).toBeLessThanOrEqual(10);
  });

  it("without a stamp (an older SDK, or httpTransport without spendStamps), A's report at its own clock keeps its 10 spends in B's window: B gets nothing", async () => {
    const { b, bUsedBefore } = await skewed(false);
    expect(bUsedBefore).toBe(10);
    expect(b).toBe(0);
  });

  // Breaks docs/quotas.md's bound table ("strict: L, exactly": at most L in ANY sliding window of W) under
  // the assumption docs/decisions/0045-strict-exactness-and-spend-stamps.md states for it ("exactness assumes callers' clocks agree within a
  // bucket"), and the Design's "the store dates them at its now less that age (its now is read after the
  // request was sent, so never before the spend)": on the direct transport the store's now is the
  // reporter's own clock, and the script files the stamp at floor((now - spentAgo) / bucket) with no regard
  // for the ring's current bucket (grants are reserved in it: "a caller whose clock is behind cannot age a
  // grant early"; a stamp is not). A spend in the first ms of a bucket, reported by a caller 5 ms behind,
  // lands one bucket early and leaves every window 50 ms early: B is granted the whole limit again while
  // A's 10 spends are still in B's window (20 in [T0+1000.2, T0+2000.2), L = 10). Before stamps the same
  // report, counted from its now (A's T0+1025), stayed in bucket 20 (the test above). The same happens to
  // one instance whose wall clock steps back a few ms between a spend and its report.
  it("a spend stamped by a caller whose clock is 5 ms behind stays in every window that holds it: B gets nothing", async () => {
    const { b } = await skewed(true);
    // A's 10 spends at real T0+1000.2 and B's grant, spent at T0+2000.1: at most L in that window
    expect(10 + b).toBeLessThanOrEqual(10);
  });

  it("a replayed seq with other stamps is a duplicate: counted once, its counts unmoved", async () => {
    const s = await store();
    const grant = await s.sync(call("a", 1, entry({ want: 10, offered: 10 })), T0);
    const at = grant.serverTime;
    const first = await s.sync(call("a", 2, entry({ usage: [[at, 10]], spentAgo: [5] })), T0 + 100);
    expect(first.status).toBe("applied");
    // the same seq again, its spends dated far back (as if all out of the window), then without ages
    const replay = await s.sync(call("a", 2, entry({ usage: [[at, 10]], spentAgo: [5000] })), T0 + 110);
    const replay2 = await s.sync(call("a", 2, entry({ usage: [[at, 10]] })), T0 + 120);
    expect([replay.status, replay2.status]).toEqual(["duplicate", "duplicate"]);
    // an age of 5 ms: dated T0 + 95, in the window at T0 + 1109, out from T0 + 1110 (the end of its 10 ms
    // bucket + W + one bucket for callers' clocks)
    const peek = (t: number) => s.read(call("r", 1, entry()), t).then(used);
    expect([await peek(T0 + 120), await peek(T0 + 1109), await peek(T0 + 1110)]).toEqual([10, 10, 0]);
  });

  it("entries of both lengths in one call: each read by its own counts (the unstamped one from now)", async () => {
    const s = await store();
    const multi: QuotaRule = { ...rule, limits: [{ windowMs: 1000, max: 20 }] };
    await s.publish("api", multi, "v2", 1, 2);
    const req = (seq: number, entries: SyncEntry[], v = "v2"): SyncRequest => ({
      instanceId: "a",
      rule: "api",
      group: 0,
      seq,
      configVersion: v,
      entries,
    });
    const g = await s.sync(
      req(1, [entry({ key: "x", want: 10, offered: 10 }), entry({ key: "y", want: 10, offered: 10 })]),
      T0,
    );
    const at = g.serverTime;
    await s.sync(
      req(2, [entry({ key: "x", usage: [[at, 10]], spentAgo: [80] }), entry({ key: "y", usage: [[at, 10]] })]),
      T0 + 100,
    );
    const peek = async (key: string, t: number) =>
      used(await s.read({ ...req(1, [entry({ key })]), instanceId: "r" }, t));
    // x dated T0 + 100 - 80, its 10 ms bucket ending at T0 + 30: out at T0 + 1040 (W and one bucket for
    // callers' clocks); y from T0 + 100: out at T0 + 1120
    expect([await peek("x", T0 + 1039), await peek("x", T0 + 1040)]).toEqual([10, 0]);
    expect([await peek("y", T0 + 1119), await peek("y", T0 + 1120)]).toEqual([10, 0]);
  });

  it("the HTTP route refuses ages that are negative, fractional, not numbers, or not one per usage pair", () => {
    const body = (spentAgo: unknown, usage: Array<[number, number]> = [[T0, 3]]) => ({
      ...call("a", 1, entry({ usage })),
      entries: [{ ...entry({ usage }), spentAgo }],
    });
    for (const bad of [[-1], [1.5], ["5"], [null], [Number.NaN], [Number.POSITIVE_INFINITY], [1, 2], []]) {
      expect(syncRequestSchema.safeParse(body(bad)).success, JSON.stringify(bad)).toBe(false);
    }
    expect(syncRequestSchema.safeParse(body([0])).success).toBe(true);
    expect(syncRequestSchema.safeParse(body([], [])).success).toBe(true);
  });
});
