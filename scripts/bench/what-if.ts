// The what-if section: `campaign what-if`'s core on BENCH_WHATIF_USERS users (10,000,000) against the bench
// cluster. Half of them got a send an hour before (the engine, counting); the what-if then decides every user
// in peek mode, with the eligible times of a 100,000-user sample of the capped; then the same campaign is
// counted for real and its totals compared with the prediction, per segment and per cap.
import { RoaringBitmap32 } from "roaring-wasm";
import { RedisCapStore, type TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import { campaignWhatIf, type WhatIfReport } from "../../functions/app/campaign-what-if.ts";
import { Capper } from "../../functions/core/capping/capper.ts";
import type { SegmentTotals } from "../../functions/core/capping/decisions.ts";
import { SegmentIndex } from "../../functions/core/capping/segment-index.ts";
import { fixedClock } from "../../functions/core/shared/clock.ts";
import { campaignPolicy, SEGMENTS, segmentOfUser, T0 } from "./campaign.ts";
import { n, today } from "./tables.ts";

const USERS = Number(process.env.BENCH_WHATIF_USERS ?? 10_000_000);
const HOUR = 3_600_000;
const BATCH = 10_000;
const IN_FLIGHT = 4;

/** Counts `userIds` for real through the capper, BATCH at a time, IN_FLIGHT at once; the totals by segment. */
async function count(capper: Capper, campaignId: string, userIds: Uint32Array, at: number) {
  const totals: Record<string, SegmentTotals> = {};
  let next = 0;
  const worker = async () => {
    while (next < userIds.length) {
      const start = next;
      next += BATCH;
      const result = await capper.capBatch({
        campaignId,
        channel: "push",
        userIds: Array.from(userIds.subarray(start, start + BATCH)),
        at,
      });
      for (const [segment, t] of Object.entries(result.totals)) {
        const into = totals[segment] ?? { allowed: 0, capped: 0, duplicate: 0, exempt: 0, cappedBy: {} };
        totals[segment] = into;
        into.allowed += t.allowed;
        into.capped += t.capped;
        into.duplicate += t.duplicate;
        into.exempt += t.exempt;
        for (const [cap, k] of Object.entries(t.cappedBy)) into.cappedBy[cap] = (into.cappedBy[cap] ?? 0) + k;
      }
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  return totals;
}

const sameAs = (report: WhatIfReport, totals: Record<string, SegmentTotals>) =>
  report.segments.length === Object.keys(totals).length &&
  report.segments.every((s) => {
    const t = totals[s.segment];
    return (
      t !== undefined &&
      t.allowed === s.allowed &&
      t.capped === s.capped &&
      t.duplicate === s.duplicate &&
      t.exempt === s.exempt &&
      JSON.stringify(Object.entries(t.cappedBy).sort()) === JSON.stringify(Object.entries(s.cappedBy).sort())
    );
  });

export async function runWhatIf(cluster: TollgateCluster): Promise<string[]> {
  const members = SEGMENTS.map(() => new RoaringBitmap32());
  for (let id = 0; id < USERS; id++) members[segmentOfUser(id)]?.add(id);
  for (const bitmap of members) bitmap.runOptimize();
  const segments = new SegmentIndex(members);
  const policy = campaignPolicy();
  const clock = fixedClock(T0);
  const capper = new Capper({
    store: new RedisCapStore(cluster),
    rules: () => ({ policy, segments }),
    clock,
    namespace: `bench-what-if-${Date.now()}`,
  });
  const everyone = Uint32Array.from({ length: USERS }, (_, i) => i);
  const seeded = performance.now();
  await count(capper, "earlier", everyone.subarray(0, USERS / 2), T0);
  const seedSeconds = (performance.now() - seeded) / 1000;
  console.log(`what-if: ${USERS / 2} users sent to in ${seedSeconds.toFixed(1)} s`);

  clock.set(T0 + HOUR);
  const userIds = Array.from(everyone);
  const started = performance.now();
  const report = await campaignWhatIf(
    capper,
    { campaignId: "next", channel: "push", userIds, at: T0 + HOUR },
    { clock, eligibleSample: 0 },
  );
  const peekSeconds = (performance.now() - started) / 1000;
  console.log(`what-if: ${USERS} users in ${peekSeconds.toFixed(1)} s`);
  const sampledAt = performance.now();
  const sampled = await campaignWhatIf(
    capper,
    { campaignId: "next", channel: "push", userIds, at: T0 + HOUR },
    { clock, eligibleSample: 100_000 },
  );
  const sampledSeconds = (performance.now() - sampledAt) / 1000;
  console.log(`what-if with eligible times: ${USERS} users in ${sampledSeconds.toFixed(1)} s`);

  const real = await count(capper, "next", everyone, T0 + HOUR);
  const equal = sameAs(report, real) && sameAs(sampled, real);
  const { total } = sampled;
  const within1d = total.eligibleAt.buckets.filter((b) => b.withinMs <= 24 * HOUR).reduce((s, b) => s + b.users, 0);
  return [
    `Measured ${today()} by \`npm run bench -- what-if\` (BENCH_WHATIF_USERS=${USERS}): the dense campaign's policy ` +
      `and segments (rules in memory, as the CLI holds them once read), half the users sent to an hour before, ` +
      "then `campaignWhatIf` (the core of `tollgate campaign what-if`) on every user, peeks of 50,000 users, 4 at once, " +
      "then the same campaign counted for real in 10,000-user batches.",
    "",
    "| Figure | Value |",
    "|---|---|",
    `| What-if, ${n(USERS)} users (target ≤ 60 s) | ${peekSeconds.toFixed(1)} s: ${n(USERS / peekSeconds)} users/s |`,
    `| What-if with the eligible times of a 100,000-user sample of the capped | ${sampledSeconds.toFixed(1)} s |`,
    `| Predicted: allowed / capped | ${n(total.allowed)} / ${n(total.capped)} (${Object.entries(total.cappedBy)
      .map(([cap, k]) => `${cap} ${n(k)}`)
      .join(", ")}) |`,
    `| Eligible again within 1 day, of the sample | ${n(within1d)} of ${n(total.eligibleAt.read)} |`,
    `| Prediction = the real run, per segment and per cap | ${equal ? "yes" : "NO"} |`,
    `| The earlier send to half the users (engine, counting), for scale | ${seedSeconds.toFixed(1)} s |`,
  ];
}
