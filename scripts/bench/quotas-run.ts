// One run of the Quotas harness: N simulated client instances over worker threads (quotas-worker.ts), open-loop
// Poisson load on one key of one rule, every decision timestamped and merged here, things done to the store
// during the run; what it admitted, against the limit, in every sliding window.
import { writeFileSync } from "node:fs";
import { Worker } from "node:worker_threads";
import { Cluster, type Redis } from "ioredis";
import { encodeRule, type QuotaRule, slotGroupKeys } from "../../sdk/src/protocol/index.ts";
import { count, instancesOf, maxInWindow, merge, onsetDelay } from "./quotas-stats.ts";
import type { WorkerInput, WorkerOutput } from "./quotas-worker.ts";
import { scriptTime } from "./redis-stats.ts";
import { seedNodes } from "./stack.ts";
import { sleep } from "./timing.ts";

export const QUICK = process.env.BENCH_QUOTAS_QUICK === "1";
export const F = Number(process.env.BENCH_QUOTAS_F ?? 50);
export const W = 1_000;
/** The second grid's window (L per 1 s of it, as the research's harness runs 5,000 per 5 s). */
export const LONG_W = 5_000;
/** L: the limit per 1 s window, as in the research simulation. */
export const L = 1_000;
export const DURATION_MS = Number(process.env.BENCH_QUOTAS_SECONDS ?? 4) * 1_000;
export const MAX_THREADS = 4;
/** A file name prefix: each run's decision times (ms from its start) are written to <prefix>.<scenario>.json. */
const TRACE = process.env.BENCH_QUOTAS_TRACE;

export type Design = "strict" | "approximate" | "grab";
export interface Scenario {
  design: Design;
  instances: number;
  load: number;
  split: "even" | "skewed";
  durationMs?: number;
  /** The rule's window (W, 1 s, unless set); its limit is L per 1 s of it unless `max` says otherwise. */
  windowMs?: number;
  max?: number;
  /** Things done to the store during the run, ms after the start. */
  events?: { at: number; run: (ctx: RunContext) => Promise<void> }[];
  watchVersion?: string;
}
export interface RunContext {
  namespace: string;
  rule: QuotaRule;
  marks: Record<string, number>;
}
export interface Result {
  scenario: Scenario;
  over: number;
  util: number;
  onsetDelayMs: number | undefined;
  callsPer1k: number;
  offeredRate: number;
  entries: number;
  calls: number;
  redisUsec: number;
  marks: Record<string, number>;
  admitted: Float64Array;
  startAt: number;
  versionSeenAt: number[];
}

export const ruleOf = (design: Design, max = L, windowMs = W): QuotaRule => ({
  mode: design === "strict" ? "strict" : "approximate",
  limits: [{ windowMs, max }],
  // strict: lease ≤ W/50 keeps utilisation high (research §A.3); approximate: an allowance outlives a few syncs
  leaseMs: design === "strict" ? 4 * F : 4 * F,
  fallback: design === "strict" ? "deny" : "share",
  slotGroups: 1,
});

function rates(total: number, n: number, split: "even" | "skewed"): number[] {
  const weights = Array.from({ length: n }, (_, i) => (split === "even" ? 1 : 1 / (i + 1)));
  const sum = weights.reduce((a, b) => a + b, 0);
  return weights.map((w) => (total * w) / sum);
}

let runCounter = 0;

export async function runScenario(ports: number[], primaries: Redis[], scenario: Scenario): Promise<Result> {
  const namespace = `bq${process.pid}x${runCounter++}`;
  const windowMs = scenario.windowMs ?? W;
  const max = scenario.max ?? (L * windowMs) / W;
  const rule = ruleOf(scenario.design, max, windowMs);
  const cluster = new Cluster(seedNodes(ports));
  await cluster.hset(slotGroupKeys(namespace, "api", 0).config, "v", "v1", "r", encodeRule(rule));
  // as many windows as a 1 s run has
  const durationMs = scenario.durationMs ?? (DURATION_MS * windowMs) / W;
  const offeredRate = (scenario.load * max * 1_000) / windowMs;
  const all = rates(offeredRate, scenario.instances, scenario.split);
  const threads = Math.min(MAX_THREADS, scenario.instances);
  // a node killed by an earlier run answers nothing: its counters are simply not read
  await Promise.all(primaries.map((p) => p.config("RESETSTAT").catch(() => {})));
  const ctx: RunContext = { namespace, rule, marks: {} };
  let release: (startAt: number) => void = () => {};
  const started = new Promise<number>((resolve) => {
    release = resolve;
  });
  const ready: Promise<void>[] = [];
  const workers = Array.from({ length: threads }, (_, t) => {
    const mine = all.map((rate, i) => ({ rate, i })).filter(({ i }) => i % threads === t);
    const input: WorkerInput = {
      ports,
      namespace,
      design: scenario.design === "grab" ? "grab" : "sdk",
      rates: mine.map((m) => m.rate),
      // the fleet's index of each: the decisions' `by` (the onset delay follows each instance on its own)
      instanceIds: mine.map((m) => m.i),
      durationMs,
      syncIntervalMs: F,
      max,
      windowMs,
      ...(scenario.watchVersion ? { watchVersion: scenario.watchVersion } : {}),
    };
    const worker = new Worker(new URL("./quotas-worker-entry.mjs", import.meta.url), { workerData: input });
    ready.push(new Promise((resolve) => worker.once("message", () => resolve())));
    started.then((startAt) => worker.postMessage({ startAt }));
    return new Promise<WorkerOutput>((done, fail) => {
      worker.once("error", fail);
      // the first message is "ready"; the second carries the results
      worker.once("message", () => worker.once("message", done));
    });
  });
  await Promise.all(ready);
  const startAt = Date.now() + 100;
  release(startAt);
  const events = (scenario.events ?? []).map(async (event) => {
    await sleep(startAt + event.at - Date.now());
    await event.run(ctx);
  });
  const outputs = await Promise.all(workers);
  await Promise.all(events);
  // a killed node counts nothing here either
  const redisUsec = (await scriptTime(primaries, { skipDown: true })).micros;
  cluster.disconnect();

  const admitted = merge(outputs.map((o) => o.admitted));
  if (TRACE) {
    const denied = merge(outputs.map((o) => o.denied));
    const { design, instances, split, load } = scenario;
    const windowTag = windowMs === W ? "" : `.w${windowMs / 1_000}`;
    const relative = (times: Float64Array) => Array.from(times, (t) => Math.round((t - startAt) * 100) / 100);
    writeFileSync(
      `${TRACE}.${design}.${instances}.${split}.${load}${windowTag}.json`,
      JSON.stringify({
        admitted: relative(admitted),
        denied: relative(denied),
        // per instance: its decisions, and its sync calls [sentAt, repliedAt, offered, amount, denyUntil, used]
        instances: instancesOf(outputs, startAt),
      }),
    );
  }
  const offeredTimes = merge(outputs.flatMap((o) => [o.admitted, o.denied]));
  const from = startAt + windowMs;
  const end = startAt + durationMs;
  const measured = count(admitted, from, end);
  const offered = count(offeredTimes, from, end);
  const calls = outputs.reduce((s, o) => s + o.syncCalls, 0);
  const entries = outputs.reduce((s, o) => s + o.syncEntries, 0);
  return {
    scenario,
    over: maxInWindow(admitted, windowMs, from) / max - 1,
    util: measured / Math.min(offered, (max * (end - from)) / windowMs),
    onsetDelayMs: onsetDelay(outputs, startAt, max, windowMs),
    callsPer1k: calls / (durationMs / 1_000) / (offeredRate / 1_000),
    offeredRate,
    entries,
    calls,
    redisUsec,
    marks: ctx.marks,
    admitted,
    startAt,
    versionSeenAt: outputs.flatMap((o) => o.versionSeenAt),
  };
}
