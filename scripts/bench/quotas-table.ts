// The Quotas section's table: the figures against their targets, the Redis CPU per key, and every run.
import { type Design, DURATION_MS, F, L, LONG_W, MAX_THREADS, QUICK, type Result, W } from "./quotas-run.ts";

/** A signed percentage: +1.5 %. */
export const pct = (x: number) => `${x >= 0 ? "+" : ""}${(100 * x).toFixed(1)} %`;

export function quotasTable(
  results: Result[],
  extra: {
    overhead: { resolvedNs: number; stringNs: number; bytes: number; gcs: number };
    high: Result;
    reach: number;
    downWorst: number;
    downFor: number;
    kill: Result;
    cpu: { lines: string[]; perKeyUs: number };
    load: { start: number; end: number };
  },
): string[] {
  const worst = (design: Design, pick: (r: Result) => boolean) => {
    const rows = results.filter((r) => r.scenario.design === design && pick(r));
    return rows.length ? Math.max(...rows.map((r) => r.over)) : Number.NaN;
  };
  const minUtil = (design: Design, windowMs: number) => {
    const pick = (r: Result) => r.scenario.instances <= 16 && (r.scenario.windowMs ?? W) === windowMs;
    const rows = results.filter((r) => r.scenario.design === design && pick(r));
    return rows.length ? Math.min(...rows.map((r) => r.util)) : Number.NaN;
  };
  // the decision delay and its run count: the 1 s grid's (the long grid runs 1.2× only)
  const oneSecond = results.filter((r) => (r.scenario.windowMs ?? W) === W);
  const delays = oneSecond
    .filter((r) => r.scenario.design === "approximate" && r.onsetDelayMs !== undefined)
    .map((r) => r.onsetDelayMs as number)
    .sort((a, b) => a - b);
  const grabDelays = oneSecond
    .filter((r) => r.scenario.design === "grab" && r.onsetDelayMs !== undefined)
    .map((r) => r.onsetDelayMs as number)
    .sort((a, b) => a - b);
  const p99 = (xs: number[]) => xs[Math.min(xs.length - 1, Math.ceil(0.99 * xs.length) - 1)] ?? Number.NaN;
  const runsOf = (design: Design) => oneSecond.filter((r) => r.scenario.design === design).length;
  // a run whose fleet never reached L in its first window had every instance denying before it: no delay
  const delay = (xs: number[], design: Design) =>
    xs.length === 0
      ? `0 ms (no run reached L: every instance denied first)`
      : `${p99(xs).toFixed(0)} ms (${xs.length} of ${runsOf(design)} runs reached L; the others denied first)`;
  // the harness's figure: all script time over all keys of the runs, one key per call, under the runs' load
  const sdkRuns = results.filter((r) => r.scenario.design !== "grab");
  const usecPerCallKey = sdkRuns.reduce((s, r) => s + r.redisUsec, 0) / sdkRuns.reduce((s, r) => s + r.entries, 0);
  const at = (load: number) => (r: Result) => r.scenario.load === load;
  const util = (design: Design, windowMs: number) => `${(100 * minUtil(design, windowMs)).toFixed(0)} %`;
  const lines = [
    `Run: ${new Date().toISOString().slice(0, 16).replace("T", " ")} UTC, \`npm run bench -- quotas\`${QUICK ? " (BENCH_QUOTAS_QUICK=1)" : ""}; machine load (1-min average, 2 cores) ${extra.load.start.toFixed(1)} at the start, ${extra.load.end.toFixed(1)} at the end; L = ${L} per ${W / 1000} s, F = ${F} ms, ${DURATION_MS / 1000} s per run (the first window is warm-up), and a second grid at ${(L * LONG_W) / W} per ${LONG_W / 1000} s (1.2×, three windows a run), N instances over ≤ ${MAX_THREADS} worker threads.`,
    "",
    "| Figure | Grab-style verdicts (same harness, same run) | Tollgate Quotas | Target |",
    "|---|---|---|---|",
    `| Over-admission, \`strict\`, worst of every run of both grids | none guarantees it | ${pct(worst("strict", () => true))}; primary SIGKILLed mid-run: ${pct(extra.kill.over)} | 0.0 % |`,
    `| Over-admission, \`approximate\`, worst at 2× / 10× | ${pct(worst("grab", at(2)))} / ${pct(worst("grab", at(10)))} | ${pct(worst("approximate", at(2)))} / ${pct(worst("approximate", at(10)))} | ≤ 5 % / ≤ 20 % |`,
    `| Decision delay at overload onset (L reached in the first window → the last instance denying), p99 over runs, N = 4–64 | ${delay(grabDelays, "grab")} | ${delay(delays, "approximate")} | ≤ 60 ms |`,
    `| Utilisation, worst (N ≤ 16, skew included): L = ${L} per ${W / 1_000} s (every load) / ${(L * LONG_W) / W} per ${LONG_W / 1_000} s (1.2×) | ${util("grab", W)} / ${util("grab", LONG_W)} | strict ${util("strict", W)} / ${util("strict", LONG_W)}, approximate ${util("approximate", W)} / ${util("approximate", LONG_W)} | ≥ 95 % / ≥ 90 % |`,
    `| SDK \`check\`, p50 | — (no local decision) | ${extra.overhead.resolvedNs.toFixed(0)} ns resolved, ${extra.overhead.stringNs.toFixed(0)} ns string keys; ${extra.overhead.bytes} bytes allocated and ${extra.overhead.gcs} GCs in 6M checks (${extra.overhead.bytes < 4_096 && extra.overhead.gcs === 0 ? "none per check: one 16-byte allocation in 1 check of 20,000 would be 4.8 KB" : "**check allocates**"}) | ≤ 100 / ≤ 300 ns, 0 allocations |`,
    `| Redis calls per 1,000 req/s (\`approximate\`, N = 16, ${extra.high.offeredRate.toLocaleString("en")}/s offered) | the check API: 1,000 (one call per request) | ${extra.high.callsPer1k.toFixed(2)} | ≤ 2 |`,
    `| Redis CPU per key updated in a sync call (script time, 20 keys per call, before the client runs) | — | ${extra.cpu.perKeyUs.toFixed(1)} µs (one key per call, during the runs: ${usecPerCallKey.toFixed(1)} µs) | ≤ 10 µs |`,
    `| Admitted per window while Redis is down ${extra.downFor / 1000} s (every node SIGSTOPped, N = 16, 2×) | N × L elsewhere (no shared state) | ${extra.downWorst.toFixed(2)} × L | ≤ 1.1 × L |`,
    `| An operator's change reaches all clients (N = 16) | Grab: "immediately" (unmeasured) | ${extra.reach.toFixed(0)} ms | ≤ 1 s |`,
    "",
    "Redis CPU of `lua/quota-sync/` per key updated (`scripts/bench/quota-sync-cpu.ts`, on the bench cluster before the client runs, in simulated time: the test build, whose store clock is a key, one GET per call more than the service's):",
    "",
    ...extra.cpu.lines,
    "",
    "Every run (W its window, L per 1 s of it; over-admission = max over sliding windows of W ÷ L − 1; util = admitted ÷ min(offered, L); onset = decision delay when the limit is first reached, — when the fleet never reached it):",
    "",
    "| Design | W | N | Split | Load | Over | Util | Onset delay | Calls per 1k req/s |",
    "|---|---|---|---|---|---|---|---|---|",
    ...results.map(
      (r) =>
        `| ${r.scenario.design === "grab" ? "Grab verdicts" : r.scenario.design} | ${(r.scenario.windowMs ?? W) / 1_000} s | ${r.scenario.instances} | ${r.scenario.split} | ${r.scenario.load}× | ${pct(r.over)} | ${(100 * r.util).toFixed(0)} % | ${r.onsetDelayMs === undefined ? "—" : `${r.onsetDelayMs.toFixed(0)} ms`} | ${r.callsPer1k.toFixed(1)} |`,
    ),
  ];
  return lines;
}
