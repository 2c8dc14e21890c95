// Named sends are recognised as duplicates for backfill + CAMPAIGN_REDELIVERY_SECONDS + 5 min after their
// time while windows stay exact, when users move between the user-record path (sparse calls, /v1/frequency)
// and the page-block path (16+ users of a page).
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { keptMs } from "../../../functions/core/capping/policy.ts";
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

type Caps = Record<string, { window: string; max: number }[]>;
const MS: Record<string, number> = { s: 1_000, m: 60_000 };
const windowMs = (window: string) => Number(window.slice(0, -1)) * (MS[window.slice(-1)] as number);
const MINUTE = 60_000;

interface Counted {
  t: number;
  channel: string;
  identity: string;
}

function fullestAround(times: number[], t: number, w: number): number {
  const ends = [t, ...times.filter((s) => s > t && s < t + w)];
  return Math.max(...ends.map((x) => times.filter((s) => s > x - w && s <= x).length));
}

const DENSE = Array.from({ length: 20 }, (_, i) => 768 + i);
const SPARSE = [5, 770, 100_000];
const SEGMENT = new Set([...DENSE.filter((u) => u % 3 === 0), 5]);

const capArbitrary = fc.record({ window: fc.constantFrom("1s", "10s", "1m"), max: fc.integer({ min: 1, max: 3 }) });
// profiles with and without a cap on a channel (a redelivery on a channel no cap reaches must still be a
// duplicate), and redelivery bounds within and beyond the longest window
const capsArbitrary: fc.Arbitrary<Caps> = fc.record(
  { a: fc.array(capArbitrary, { maxLength: 2 }), "*": fc.array(capArbitrary, { maxLength: 1 }) },
  { requiredKeys: [] },
);
const stepArbitrary = fc.record({
  kind: fc.constantFrom("batch", "batch", "dense", "check", "redeliver", "redeliver", "exemptCounted"),
  users: fc.subarray([...DENSE, ...SPARSE], { minLength: 1 }),
  user: fc.constantFrom(...DENSE.slice(0, 4), ...SPARSE),
  campaign: fc.constantFrom("k1", "k2", "k3", ""),
  channel: fc.constantFrom("a", "b"),
  offset: fc.integer({ min: -90_000, max: 300_000 }),
  advance: fc.oneof(
    { weight: 3, arbitrary: fc.integer({ min: 0, max: 5_000 }) },
    { weight: 2, arbitrary: fc.integer({ min: 5 * MINUTE, max: 20 * MINUTE }) },
  ),
});

describe("review: redelivery bound across the record and block paths", () => {
  it("recognises a named send as duplicate exactly while now - kept < its time, and keeps every window within max, with users moving between record and block paths, /v1/frequency checks, exempt-but-counted sends and skewed at", async () => {
    await fc.assert(
      fc.asyncProperty(
        capsArbitrary,
        capsArbitrary,
        fc.constantFrom(30_000, 2 * MINUTE, 10 * MINUTE),
        fc.array(stepArbitrary, { minLength: 4, maxLength: 16 }),
        async (segmentCaps, defaultCaps, redeliveryMs, steps) => {
          const rules = rulesOf(
            {
              version: "v1",
              channels: ["a", "b"],
              segments: [{ name: "s", bitmap: "segments/s.roaring", caps: segmentCaps }],
              default: { name: "rest", caps: defaultCaps },
            },
            { s: [...SEGMENT] },
          );
          const policy = rules.policy;
          const clock = fixedClock(T0);
          const capper = new Capper({ store, rules: () => rules, clock, namespace: uniqueNamespace(), redeliveryMs });
          const ledger = new Map<number, Counted[]>();
          const history: { campaignId: string; channel: string; userIds: number[]; at: number }[] = [];
          const expectedFor = (
            user: number,
            send: { campaignId: string; channel: string; at: number; exemptCounted?: boolean },
          ) => {
            const segment = SEGMENT.has(user) ? 0 : 1;
            const mine = ledger.get(user) ?? [];
            const cutoff = clock.now() - keptMs(policy, segment, redeliveryMs);
            const identity = `${send.campaignId}|${send.channel}`;
            if (send.campaignId !== "" && mine.some((s) => s.identity === identity && s.t > cutoff)) return "duplicate";
            if (send.exemptCounted) return "exempt";
            const caps = segment === 0 ? segmentCaps : defaultCaps;
            const applicable = [
              ...(caps[send.channel] ?? []).map((c) => ({ ...c, every: false })),
              ...(caps["*"] ?? []).map((c) => ({ ...c, every: true })),
            ];
            for (const cap of applicable) {
              const times = mine.filter((s) => cap.every || s.channel === send.channel).map((s) => s.t);
              if (fullestAround(times, send.at, windowMs(cap.window)) >= cap.max) return "capped";
            }
            return "allowed";
          };
          const count = (user: number, send: { campaignId: string; channel: string; at: number }) => {
            const mine = ledger.get(user) ?? [];
            mine.push({ t: send.at, channel: send.channel, identity: `${send.campaignId}|${send.channel}` });
            ledger.set(user, mine);
          };
          for (const step of steps) {
            clock.advance(step.advance);
            const at = clock.now() + Math.max(step.offset, -policy.backfillMs);
            const context = JSON.stringify({ step, now: clock.now() - T0 });
            if (step.kind === "check") {
              const send = { campaignId: step.campaign, channel: step.channel, at };
              const expected = expectedFor(step.user, send);
              const result = await capper.checkUser({
                userId: step.user,
                channel: step.channel,
                at,
                ...(step.campaign ? { campaignId: step.campaign } : {}),
              });
              expect(result.decision, context).toBe(expected);
              if (expected === "allowed") count(step.user, send);
              continue;
            }
            let batch: { campaignId: string; channel: string; userIds: number[]; at: number } = {
              campaignId: step.campaign || "k0",
              channel: step.channel,
              userIds: step.kind === "dense" ? DENSE : [...new Set(step.users)],
              at,
            };
            if (step.kind === "redeliver") {
              const previous = history[step.advance % Math.max(history.length, 1)];
              if (!previous || previous.at <= clock.now() - policy.backfillMs) continue;
              batch = previous;
            }
            const exemptCounted = step.kind === "exemptCounted";
            const expected = batch.userIds.map((user) => {
              const decision = expectedFor(user, { ...batch, exemptCounted });
              if (decision === "allowed" || decision === "exempt") count(user, batch);
              return decision;
            });
            const result = await capper.capBatch({
              ...batch,
              ...(exemptCounted ? { exempt: true, countExempt: true } : {}),
            });
            expect(
              result.decisions.map((d) => d.decision),
              context,
            ).toEqual(expected);
            history.push(batch);
          }
        },
      ),
      { numRuns: Number(process.env.REVIEW_RUNS ?? 30) },
    );
  }, 240_000);
});
