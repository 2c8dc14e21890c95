// A property against the contract ("strict: no window of W holds more than max used tokens"), with the real
// script in real time: the reference clock is the store's (TIME, read before each call; the test waits
// between calls), and each instance's clock is the reference plus a random constant offset of up to ±2 s
// that steps once mid-run, forward or back, by up to 1.5 s. Every spend is recorded on the reference clock; spend ages are measured on it too, as
// the SDK measures them on its monotonic clock.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { RedisQuotaStore } from "../../../functions/adapters/redis-quota-store.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

const L = 20;
const W = 1_000;
const LEASE = 300;

/** The store's clock (ms), read from the node. */
async function storeTime(): Promise<number> {
  const [seconds, micros] = await cluster.time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

/** The most spends in any window of W (reference times). */
function worstWindow(times: number[]): number {
  const sorted = [...times].sort((a, b) => a - b);
  let best = 0;
  for (let end = 0, start = 0; end < sorted.length; end++) {
    while (sorted[end]! - sorted[start]! >= W) start++;
    best = Math.max(best, end - start + 1);
  }
  return best;
}

const instanceArb = fc.record({
  // far beyond the store's 10 ms margin for spend stamps: the store holds each call's time within it of its
  // own clock (docs/decisions/0120-quota-time-bounded-by-the-store-clock.md)
  offset: fc.integer({ min: -2_000, max: 2_000 }),
  step: fc.integer({ min: -1_500, max: 1_500 }),
  stepAt: fc.nat({ max: 40 }),
});
const stepArb = fc.record({ instance: fc.nat({ max: 2 }), gapMs: fc.nat({ max: 60 }), spend: fc.nat({ max: 8 }) });

/**
 * The property: three instances' clocks, each its offset plus one step at `stepAt` (a global step index),
 * and a history of syncs and spends. `stepsBeforeFirstSync`: a step due before the instance's first sync
 * applies from that sync on, i.e. is a constant offset of up to 1.5 s from the start.
 */
const strictUnderClocks = (stepsBeforeFirstSync: boolean) =>
  fc.asyncProperty(
    fc.array(instanceArb, { minLength: 3, maxLength: 3 }),
    fc.array(stepArb, { minLength: 20, maxLength: 40 }),
    async (clocks, steps) => {
      const store = new RedisQuotaStore(cluster, uniqueNamespace());
      const rule = {
        mode: "strict" as const,
        limits: [{ windowMs: W, max: L }],
        leaseMs: LEASE,
        fallback: "deny" as const,
        slotGroups: 1,
      };
      await store.publish("api", rule, "v1", 1, 1);
      const state = clocks.map(() => ({
        stepped: false,
        seq: 0,
        held: [] as { grantedAt: number; left: number; until: number }[],
        spent: [] as { grantedAt: number; count: number; at: number }[],
      }));
      const spends: number[] = [];
      const start = await storeTime();
      for (const [s, step] of steps.entries()) {
        await new Promise((resolve) => setTimeout(resolve, step.gapMs));
        const t = (await storeTime()) - start;
        const me = state[step.instance]!;
        const clock = clocks[step.instance]!;
        // a step counts once the instance has synced: before that it is a constant offset (below)
        if (s >= clock.stepAt && (me.seq > 0 || stepsBeforeFirstSync)) me.stepped = true;
        const callerNow = start + t + clock.offset + (me.stepped ? clock.step : 0);
        const reply = await store.sync(
          {
            instanceId: `i${step.instance}`,
            rule: "api",
            group: 0,
            seq: ++me.seq,
            configVersion: "v1",
            entries: [
              {
                key: "k",
                usage: me.spent.map((x) => [x.grantedAt, x.count]),
                spentAgo: me.spent.map((x) => t - x.at),
                refunds: [],
                offered: step.spend,
                want: 5,
              },
            ],
          },
          callerNow,
        );
        me.spent = [];
        const assignment = reply.entries[0];
        if (assignment?.mode === "strict" && assignment.tokens > 0) {
          // usable until its lease ends, converted from the moment the request was sent (reference t)
          me.held.push({
            grantedAt: reply.serverTime,
            left: assignment.tokens,
            until: t + (assignment.leaseExpiresAt - reply.serverTime),
          });
        }
        let spend = step.spend;
        for (const grant of me.held) {
          if (grant.until <= t) continue;
          const count = Math.min(spend, grant.left);
          if (count === 0) continue;
          grant.left -= count;
          spend -= count;
          me.spent.push({ grantedAt: grant.grantedAt, count, at: t });
          for (let c = 0; c < count; c++) spends.push(t);
        }
        me.held = me.held.filter((grant) => grant.left > 0 && grant.until > t);
      }
      expect(worstWindow(spends)).toBeLessThanOrEqual(L);
    },
  );

describe("strict under per-instance clock offsets (real script, contract checker)", () => {
  it("random offsets of up to ±2 s, each stepping once mid-run by up to ±1.5 s, never let a window of W exceed max", async () => {
    await fc.assert(strictUnderClocks(false), { numRuns: 8, endOnFailure: true });
  }, 120_000);

  // a lagging instance made the slot group's first call and started its time 1.5 s back, so its grants left
  // every window early once the next caller moved the rings on (35 of 20); the store's clock now bounds it
  it("a constant offset of 1.5 s on one instance from its first sync keeps every window of W within max", async () => {
    await fc.assert(strictUnderClocks(true), { numRuns: 1, seed: 1679734874, path: "2", endOnFailure: true });
  }, 120_000);
});
