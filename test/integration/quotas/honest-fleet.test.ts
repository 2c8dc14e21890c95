// quota-sync.lua against a fleet of honest instances, approximate and strict: what every window holds stays
// within the contract's bound.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { RedisQuotaStore } from "../../../functions/adapters/redis-quota-store.ts";
import type {
  ApproximateAssignment,
  QuotaRule,
  StrictAssignment,
  SyncEntry,
  SyncRequest,
} from "../../../sdk/src/protocol/index.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

describe("review: quota-sync.lua approximate, a fleet of honest instances (docs/quotas.md 'approximate')", () => {
  it("every window the store answers holds each admission of its last W and the allowance, stays within max while it grants, and a lowered max grants nothing while over it; a retry answers the same allowance", async () => {
    const stepArbitrary = fc.record({
      instance: fc.integer({ min: 0, max: 3 }),
      gap: fc.oneof(fc.integer({ min: 0, max: 60 }), fc.integer({ min: 0, max: 1500 })),
      spend: fc.double({ min: 0, max: 1, noNaN: true }),
      offered: fc.integer({ min: 0, max: 80 }),
      retry: fc.boolean(),
      operator: fc.integer({ min: 0, max: 12 }),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(fc.constantFrom(1000, 2000, 5000), { minLength: 1, maxLength: 2 }),
        fc.integer({ min: 20, max: 200 }),
        fc.array(stepArbitrary, { minLength: 5, maxLength: 40 }),
        async (windows, firstMax, steps) => {
          let limits = windows.map((windowMs) => ({ windowMs, max: firstMax }));
          const ruleOf = (l: QuotaRule["limits"]): QuotaRule => ({
            mode: "approximate",
            leaseMs: 1000,
            fallback: "share",
            slotGroups: 1,
            limits: l,
          });
          const store = new RedisQuotaStore(cluster, uniqueNamespace());
          let version = 1;
          await store.publish("api", ruleOf(limits), `v${version}`, 1, version);
          let now = T0;
          const seqs = [0, 0, 0, 0];
          const held: Array<{ grantAt: number; allowance: number } | undefined> = [];
          // every admission's time, as the instances made them
          const admitted: number[] = [];
          for (const step of steps) {
            now += step.gap;
            if (step.operator === 0) {
              limits = limits.map((limit) => ({ ...limit, max: Math.max(1, Math.floor(limit.max * 0.4)) }));
              version++;
              await store.publish("api", ruleOf(limits), `v${version}`, 1, version);
            }
            const i = step.instance;
            // an honest instance spends at most its allowance, within the bucket of its grant
            const usage: Array<[number, number]> = [];
            const mine = held[i];
            const spent = mine ? Math.floor(mine.allowance * step.spend) : 0;
            if (mine && spent > 0) {
              const at = Math.min(Math.floor(mine.grantAt / 50) * 50 + 49, now);
              usage.push([at, spent]);
              for (let n = 0; n < spent; n++) admitted.push(at);
            }
            const entry: SyncEntry = { key: "k", usage, refunds: [], offered: step.offered, want: 0 };
            const request: SyncRequest = {
              instanceId: `i${i}`,
              rule: "api",
              group: 0,
              seq: ++seqs[i]!,
              configVersion: "",
              entries: [entry],
            };
            const reply = await store.sync(request, now);
            expect(reply.status).toBe("applied");
            const got = reply.entries[0] as ApproximateAssignment;
            const context = JSON.stringify({ now: now - T0, limits, got, admitted: admitted.map((t) => t - T0) });
            got.used.forEach((used, w) => {
              const limit = limits[w] as QuotaRule["limits"][number];
              const inWindow = admitted.filter((t) => t > now - limit.windowMs && t <= now).length;
              expect(used, context).toBeGreaterThanOrEqual(inWindow + got.allowance);
              if (got.allowance > 0) expect(used, context).toBeLessThanOrEqual(limit.max);
            });
            held[i] = { grantAt: now, allowance: got.allowance };
            if (step.retry) {
              const again = await store.sync(request, now + 1);
              expect(again.status).toBe("duplicate");
              expect((again.entries[0] as ApproximateAssignment).allowance, context).toBe(got.allowance);
            }
          }
        },
      ),
      { numRuns: Number(process.env.REVIEW_RUNS ?? 10) },
    );
  }, 120_000);
});

describe("review: quota-sync.lua strict, a fleet of honest instances (DESIGN.md: strict never exceeds the limit)", () => {
  it("honest instances spending granted tokens within their lease, reporting what they spent and refunding the rest: no window of W holds more than max spent tokens", async () => {
    const stepArbitrary = fc.record({
      instance: fc.integer({ min: 0, max: 3 }),
      gap: fc.oneof(
        fc.integer({ min: 0, max: 60 }),
        fc.integer({ min: 0, max: 700 }),
        fc.integer({ min: 1000, max: 6000 }),
      ),
      spend: fc.double({ min: 0, max: 1, noNaN: true }),
      early: fc.double({ min: 0, max: 1, noNaN: true }),
      want: fc.integer({ min: 0, max: 30 }),
      retry: fc.boolean(),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(fc.constantFrom(1000, 2000, 5000), { minLength: 1, maxLength: 2 }),
        fc.integer({ min: 5, max: 60 }),
        fc.constantFrom(50, 100, 200),
        fc.array(stepArbitrary, { minLength: 5, maxLength: 50 }),
        async (windows, max, leaseMs, steps) => {
          const rule: QuotaRule = {
            mode: "strict",
            leaseMs,
            fallback: "deny",
            slotGroups: 1,
            limits: windows.map((windowMs) => ({ windowMs, max })),
          };
          const store = new RedisQuotaStore(cluster, uniqueNamespace());
          await store.publish("api", rule, "v1", 1, 1);
          let now = T0;
          const seqs = [0, 0, 0, 0];
          const lastSync = [T0, T0, T0, T0];
          // per instance, the grants it holds: tokens left and tokens spent since its last report
          type Grant = { grantedAt: number; expires: number; left: number; spentUnreported: number };
          const grants = Array.from({ length: 4 }, (): Grant[] => []);
          // the time of every token spent, by any instance
          const spent: number[] = [];
          for (const step of steps) {
            now += step.gap;
            const i = step.instance;
            // spend: tokens of live grants, at a time between the last sync and now, before the lease ends
            const t = Math.floor(lastSync[i]! + (now - lastSync[i]!) * step.early);
            for (const g of grants[i]!) {
              if (t >= g.expires || t < g.grantedAt) continue;
              const k = Math.floor(g.left * step.spend);
              g.left -= k;
              g.spentUnreported += k;
              for (let n = 0; n < k; n++) spent.push(t);
            }
            const usage: Array<[number, number]> = [];
            const refunds: Array<[number, number]> = [];
            for (const g of grants[i]!) {
              if (g.spentUnreported > 0) usage.push([g.grantedAt, g.spentUnreported]);
              g.spentUnreported = 0;
              if (now >= g.expires && g.left > 0) {
                refunds.push([g.grantedAt, g.left]);
                g.left = 0;
              }
            }
            grants[i] = grants[i]!.filter((g) => g.left > 0);
            // reports what it spent per grant and refunds what expired unused; a retry (same seq) changes nothing
            const request: SyncRequest = {
              instanceId: `s${i}`,
              rule: "api",
              group: 0,
              seq: ++seqs[i]!,
              configVersion: "v1",
              entries: [{ key: "k", usage, refunds, offered: step.want, want: step.want }],
            };
            const reply = await store.sync(request, now);
            if (step.retry) await store.sync(request, now + 1);
            lastSync[i] = now;
            const e = reply.entries[0] as StrictAssignment;
            if (e.tokens > 0)
              grants[i]!.push({
                grantedAt: reply.serverTime,
                expires: e.leaseExpiresAt,
                left: e.tokens,
                spentUnreported: 0,
              });
          }
          for (const w of windows) {
            const sorted = [...spent].sort((a, b) => a - b);
            let worst = 0;
            for (let a = 0, b = 0; b < sorted.length; b++) {
              while (sorted[a]! <= sorted[b]! - w) a++;
              worst = Math.max(worst, b - a + 1);
            }
            expect(worst, JSON.stringify({ w, max, leaseMs, spent: sorted.map((x) => x - T0) })).toBeLessThanOrEqual(
              max,
            );
          }
        },
      ),
      { numRuns: Number(process.env.REVIEW_RUNS ?? 10) },
    );
  }, 300_000);
});
