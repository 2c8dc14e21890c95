// The Quotas bench: N simulated client instances (spread over worker threads) against the local Redis
// Cluster, open-loop Poisson load on one key, every decision timestamped and merged here; over-admission
// is the max over sliding windows. The SDK's strict and approximate modes and Grab's binary-verdict design
// run through the same harness in the same run. Not a test: it asserts nothing, it measures. The table
// replaces the marked section of docs/quotas.md.
//
//   npm run bench -- quotas (or tsx scripts/bench/quotas.ts)   BENCH_BASE_PORT (7200)
//   BENCH_QUOTAS_QUICK=1 (a smaller grid)  BENCH_QUOTAS_SECONDS (4 per run)  BENCH_QUOTAS_DESIGNS (strict,approximate,grab)
//   BENCH_QUOTAS_LOADS, _SIZES, _SPLITS (comma lists: a grid of your own)  BENCH_QUOTAS_GRID_ONLY=1 (the grid's
//   lines only: no table, no other section; for iterating on one figure)  BENCH_QUOTAS_TRACE=<prefix> (each run's
//   admission and denial times, ms from its start, to <prefix>.<design>.<N>.<split>.<load>[.w<W s>].json)
//   BENCH_QUOTAS_F (50: the clients' sync interval, ms)  BENCH_QUOTAS_WINDOW_S (1: the window of a GRID_ONLY
//   grid, its limit 1,000 per 1 s of it; 5 is the full run's second grid)
import { readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { Worker } from "node:worker_threads";
import calculateSlot from "cluster-key-slot";
import { Cluster, Redis } from "ioredis";
import { createRedisCluster } from "../../functions/adapters/redis-cluster.ts";
import { createQuotas } from "../../sdk/src/index.ts";
import { encodeRule, type QuotaRule, slotGroupKeys, slotGroupPrefix } from "../../sdk/src/wire.ts";
import { youngBytesDuring } from "../../sdk/test/support/young-bytes.ts";
import { isMain } from "../is-main.ts";
import { startCluster, stopCluster } from "../redis-cluster.ts";
import { runQuotaSyncCpu } from "./quota-sync-cpu.ts";
import type { WorkerInput, WorkerOutput } from "./quotas-worker.ts";
import { schedulePrimaries } from "./redis-priority.ts";

const BASE_PORT = Number(process.env.BENCH_BASE_PORT ?? 7200);
const QUICK = process.env.BENCH_QUOTAS_QUICK === "1";
const F = Number(process.env.BENCH_QUOTAS_F ?? 50);
const W = 1_000;
/** The second grid's window (L per 1 s of it, as the research's harness runs 5,000 per 5 s). */
const LONG_W = 5_000;
/** L: the limit per 1 s window, as in the research simulation. */
const L = 1_000;
const DURATION_MS = Number(process.env.BENCH_QUOTAS_SECONDS ?? 4) * 1_000;
const MAX_THREADS = 4;
const GRID_ONLY = process.env.BENCH_QUOTAS_GRID_ONLY === "1";
/** A file name prefix: each run's decision times (ms from its start) are written to <prefix>.<scenario>.json. */
const TRACE = process.env.BENCH_QUOTAS_TRACE;
const listEnv = (name: string): string[] | undefined => process.env[name]?.split(",");

type Design = "strict" | "approximate" | "grab";
interface Scenario {
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
interface RunContext {
  namespace: string;
  rule: QuotaRule;
  marks: Record<string, number>;
}
interface Result {
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

const ruleOf = (design: Design, max = L, windowMs = W): QuotaRule => ({
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

async function runScenario(ports: number[], primaries: Redis[], scenario: Scenario): Promise<Result> {
  const namespace = `bq${process.pid}x${runCounter++}`;
  const windowMs = scenario.windowMs ?? W;
  const max = scenario.max ?? (L * windowMs) / W;
  const rule = ruleOf(scenario.design, max, windowMs);
  const cluster = new Cluster(ports.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })));
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
  const redisUsec = await scriptUsec(primaries);
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

/** The trace's per-instance view: each instance's admissions, denials and sync calls, ms from the start. */
function instancesOf(outputs: WorkerOutput[], startAt: number) {
  const at = (t: number) => Math.round((t - startAt) * 100) / 100;
  const by = new Map<number, { admitted: number[]; denied: number[]; syncs: number[][] }>();
  const of = (i: number) => {
    const entry = by.get(i) ?? { admitted: [], denied: [], syncs: [] };
    by.set(i, entry);
    return entry;
  };
  for (const o of outputs) {
    for (let k = 0; k < o.admitted.length; k++)
      of(o.admittedBy[k] as number).admitted.push(at(o.admitted[k] as number));
    for (let k = 0; k < o.denied.length; k++) of(o.deniedBy[k] as number).denied.push(at(o.denied[k] as number));
    const s = o.syncs ?? [];
    for (let k = 0; k < s.length; k += 7) {
      const [i, sent, replied, offered, amount, denyUntil, used] = s.slice(k, k + 7) as number[];
      of(i as number).syncs.push([
        at(sent as number),
        at(replied as number),
        offered as number,
        amount as number,
        denyUntil ? at(denyUntil) : 0,
        used as number,
      ]);
    }
  }
  return Object.fromEntries([...by].sort((a, b) => a[0] - b[0]));
}

function merge(parts: Float64Array[]): Float64Array {
  const all = new Float64Array(parts.reduce((s, p) => s + p.length, 0));
  let at = 0;
  for (const p of parts) {
    all.set(p, at);
    at += p.length;
  }
  return all.sort();
}

function count(times: Float64Array, from: number, to: number): number {
  let n = 0;
  for (const t of times) if (t >= from && t < to) n++;
  return n;
}

/** The most admissions in any window of `windowMs` that ends at or after `from` (earlier ones are warm-up). */
function maxInWindow(times: Float64Array, windowMs: number, from: number, to = Number.POSITIVE_INFINITY): number {
  let best = 0;
  let start = 0;
  for (let end = 0; end < times.length; end++) {
    const t = times[end] as number;
    while (t - (times[start] as number) >= windowMs) start++;
    if (t >= from && t <= to) best = Math.max(best, end - start + 1);
  }
  return best;
}

/**
 * Decision delay at the onset of overload: from the moment the admitted count first reaches the limit (in
 * the first window, when nothing has left it yet) to the last admission of the instance that kept
 * admitting longest before its first denial.
 */
function onsetDelay(outputs: WorkerOutput[], startAt: number, max: number, windowMs: number): number | undefined {
  const events: { t: number; by: number; ok: boolean }[] = [];
  for (const o of outputs) {
    for (let i = 0; i < o.admitted.length; i++)
      events.push({ t: o.admitted[i] as number, by: o.admittedBy[i] as number, ok: true });
    for (let i = 0; i < o.denied.length; i++)
      events.push({ t: o.denied[i] as number, by: o.deniedBy[i] as number, ok: false });
  }
  events.sort((a, b) => a.t - b.t);
  let admittedSoFar = 0;
  let reachedAt: number | undefined;
  const firstDenial = new Map<number, number>();
  const lastAdmit = new Map<number, number>();
  for (const e of events) {
    if (e.t >= startAt + windowMs) break;
    if (reachedAt === undefined) {
      if (e.ok && ++admittedSoFar >= max) reachedAt = e.t;
      continue;
    }
    if (!e.ok && !firstDenial.has(e.by)) firstDenial.set(e.by, e.t);
    if (e.ok && !firstDenial.has(e.by)) lastAdmit.set(e.by, e.t);
  }
  if (reachedAt === undefined) return undefined;
  let delay = 0;
  for (const t of lastAdmit.values()) delay = Math.max(delay, t - reachedAt);
  return delay;
}

async function scriptUsec(primaries: Redis[]): Promise<number> {
  let usec = 0;
  for (const p of primaries) {
    const info = await p.info("commandstats").catch(() => "");
    for (const m of info.matchAll(/cmdstat_(evalsha|eval|fcall):calls=\d+,usec=(\d+)/g)) usec += Number(m[2]);
  }
  return usec;
}

/** The primary serving the rule's slot group, with its pid from the pidfile scripts/redis-cluster.ts wrote. */
async function primaryOf(cluster: Cluster, namespace: string): Promise<{ port: number; pid: number }> {
  const slot = calculateSlot(`${slotGroupPrefix(namespace, "api", 0)}:cfg`);
  const shards = (await cluster.cluster("SLOTS")) as unknown as [number, number, [string, number]][];
  const port = shards.find(([a, b]) => slot >= a && slot <= b)![2][1];
  return { port, pid: pidOf(port) };
}

function pidOf(port: number): number {
  const dir = resolve(join(".local", "redis-cluster", String(BASE_PORT), String(port), "redis.pid"));
  return Number(readFileSync(dir, "utf8").trim());
}

/** check() overhead, p50 of 10,000-call batches, and what 6M checks allocate (bytes, GCs). */
async function checkOverhead(): Promise<{ resolvedNs: number; stringNs: number; bytes: number; gcs: number }> {
  const rule: QuotaRule = { ...ruleOf("approximate"), limits: [{ windowMs: W, max: 1e12 }] };
  const quotas = createQuotas({
    rules: { api: rule },
    transport: {
      async sync(request, now) {
        return {
          status: "applied",
          serverTime: now,
          configVersion: "v1",
          instances: 1,
          entries: request.entries.map((e) => ({
            mode: "approximate" as const,
            key: e.key,
            allowance: 1e12,
            validUntil: now + 3_600_000,
            denyUntil: 0,
            resetAt: now + 1_000,
            used: [0],
          })),
        };
      },
    },
  });
  const keys = Array.from({ length: 10_000 }, (_, i) => `tenant-${i}`);
  const handles = keys.map((k) => quotas.resolve("api", k));
  while (
    quotas.engine.rule("api")!.groups.some((g) => g.handles.size > 0 && [...g.handles].some((h) => h.assignedAt < 0))
  ) {
    await quotas.sync();
  }
  // performance.now() and a preallocated array: the timing itself allocates little, but some (a boxed
  // number per performance.now() outside optimised code, the sort's copy): allocations are counted below
  const samples = new Float64Array(300);
  const batch = (fn: (i: number) => void) => {
    for (let round = 0; round < samples.length; round++) {
      const t0 = performance.now();
      for (let i = 0; i < 10_000; i++) fn(i);
      samples[round] = ((performance.now() - t0) * 1e6) / 10_000;
    }
    return samples.slice().sort()[samples.length >> 1] as number;
  };
  // warm the JIT, then measure
  batch((i) => quotas.checkHandle(handles[i]!));
  batch((i) => quotas.check("api", keys[i]!));
  const resolvedNs = batch((i) => quotas.checkHandle(handles[i]!));
  const stringNs = batch((i) => quotas.check("api", keys[i]!));
  // the same 6M checks untimed, their allocations counted in the young generation's bytes (as in
  // sdk/test/engine/check-allocation.test.ts); a GC meanwhile would be one the checks caused. The loop runs once
  // before it is measured, as in the test: a new function's first run allocates V8's own feedback and
  // on-stack-replacement code once (up to a few hundred bytes), which is not the checks'
  const checks = () => {
    for (let round = 0; round < samples.length; round++) {
      for (let i = 0; i < 10_000; i++) {
        quotas.checkHandle(handles[i]!);
        quotas.check("api", keys[i]!);
      }
    }
  };
  checks();
  const { bytes, gcs } = youngBytesDuring(checks);
  return { resolvedNs, stringNs, bytes, gcs };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)));
const pct = (x: number) => `${x >= 0 ? "+" : ""}${(100 * x).toFixed(1)} %`;

/** Every design × N × split × load of the grid, one line each as it ends (`grid` sets the defaults). */
async function runGrid(
  ports: number[],
  primaries: Redis[],
  windowMs = W,
  grid: { loads?: number[]; sizes?: number[]; splits?: Scenario["split"][]; windows?: number } = {},
): Promise<Result[]> {
  const loads = listEnv("BENCH_QUOTAS_LOADS")?.map(Number) ?? grid.loads ?? (QUICK ? [2, 10] : [1.2, 2, 10]);
  const sizes = listEnv("BENCH_QUOTAS_SIZES")?.map(Number) ?? grid.sizes ?? (QUICK ? [4, 16] : [4, 16, 64]);
  const splits = (listEnv("BENCH_QUOTAS_SPLITS") ??
    grid.splits ??
    (QUICK ? ["even"] : ["even", "skewed"])) as Scenario["split"][];
  const designs = (listEnv("BENCH_QUOTAS_DESIGNS") ?? ["strict", "approximate", "grab"]) as Design[];
  const durationMs = grid.windows === undefined ? undefined : grid.windows * windowMs;
  const results: Result[] = [];
  for (const design of designs) {
    for (const instances of sizes) {
      for (const split of splits) {
        for (const load of loads) {
          const result = await runScenario(ports, primaries, {
            design,
            instances,
            load,
            split,
            windowMs,
            ...(durationMs ? { durationMs } : {}),
          });
          results.push(result);
          console.log(
            `${design} N=${instances} ${split} ${load}×${windowMs === W ? "" : ` W=${windowMs / 1_000} s`}: over ${pct(result.over)}, util ${(100 * result.util).toFixed(0)} %,` +
              ` onset ${result.onsetDelayMs?.toFixed(0)} ms, ${result.callsPer1k.toFixed(1)} calls per 1k req/s`,
          );
        }
      }
    }
  }
  return results;
}

export async function runQuotasBench(): Promise<string[]> {
  const local = await startCluster({ basePort: BASE_PORT });
  const ports = local.ports;
  const scheduling = await schedulePrimaries(local.host, ports);
  console.log(scheduling);
  const primaries: Redis[] = [];
  const lines: string[] = [];
  try {
    const probe = new Cluster(ports.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })));
    await probe.ping();
    for (const node of probe.nodes("master"))
      primaries.push(new Redis({ host: "127.0.0.1", port: node.options.port! }));
    await probe.quit();

    const loadAtStart = loadavg()[0] as number;
    if (GRID_ONLY) {
      await runGrid(ports, primaries, Number(process.env.BENCH_QUOTAS_WINDOW_S ?? 1) * 1_000);
      return lines;
    }
    const overhead = await checkOverhead();
    console.log("check overhead", overhead);

    // Redis CPU per key updated, on the cluster before any client run loads it: the script's own time
    // (commandstats), many keys per call as the SDK sends them
    const cpuCluster = createRedisCluster({ nodes: ports.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })) });
    const cpu = await runQuotaSyncCpu(cpuCluster, QUICK ? 200 : 500);
    await cpuCluster.quit();
    console.log(cpu.lines.join("\n"));

    const results = await runGrid(ports, primaries);
    // the research's second configuration, L = 5,000 per 5 s (the same rate) at 1.2×, where utilisation is
    // lowest: what a token costs besides its window (its time in stock, its stamp's bucket and margin) is
    // the same few tens of ms, a fifth of the share of the window it takes at 1 s. Three windows a run
    // (the first is warm-up), so it adds about 3 minutes
    results.push(
      ...(await runGrid(ports, primaries, LONG_W, {
        loads: [1.2],
        sizes: QUICK ? [16] : [4, 16],
        splits: QUICK ? ["even"] : ["even", "skewed"],
        windows: 3,
      })),
    );

    // Redis calls per 1,000 req/s at a high rate (calls do not grow with traffic in approximate mode)
    const high = await runScenario(ports, primaries, {
      design: "approximate",
      instances: 16,
      load: 2,
      split: "even",
      max: QUICK ? 20_000 : 100_000,
      durationMs: 3_000,
    });
    console.log(`high rate ${high.offeredRate}/s: ${high.callsPer1k.toFixed(2)} calls per 1k req/s`);

    // an operator's change: max lowered mid-run; when does every instance hold the new version?
    const change = await runScenario(ports, primaries, {
      design: "approximate",
      instances: 16,
      load: 2,
      split: "even",
      watchVersion: "v2",
      events: [
        {
          at: 2_000,
          run: async (ctx) => {
            const cluster = new Cluster(ports.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })));
            const next = encodeRule({ ...ctx.rule, limits: [{ windowMs: W, max: 800 }] });
            await cluster.hset(slotGroupKeys(ctx.namespace, "api", 0).config, "v", "v2", "r", next);
            ctx.marks.changedAt = Date.now();
            await cluster.quit();
          },
        },
      ],
    });
    const reach = Math.max(...change.versionSeenAt) - (change.marks.changedAt ?? 0);
    console.log(`config change reached every instance in ${reach.toFixed(0)} ms`);

    // Redis down 10 s (every primary stopped): what is admitted per window meanwhile
    const downFor = QUICK ? 4_000 : 10_000;
    const down = await runScenario(ports, primaries, {
      design: "approximate",
      instances: 16,
      load: 2,
      split: "even",
      durationMs: downFor + 5_000,
      events: [
        {
          at: 2_000,
          run: async (ctx) => {
            const pids = ports.slice(0, 6).map(pidOf);
            ctx.marks.downAt = Date.now();
            // SIGSTOP on every node: no node answers, and with no primary able to vote, no failover
            for (const pid of pids) process.kill(pid, "SIGSTOP");
            await sleep(downFor);
            for (const pid of pids) process.kill(pid, "SIGCONT");
            ctx.marks.upAt = Date.now();
          },
        },
      ],
    });
    const downWorst = maxInWindow(down.admitted, W, down.marks.downAt! + W, down.marks.upAt!) / L;
    console.log(`Redis down ${downFor / 1_000} s: at most ${downWorst.toFixed(2)} × L per window`);

    // strict with the primary of the rule's slot SIGKILLed mid-run (the last run: the node stays dead)
    const kill = await runScenario(ports, primaries, {
      design: "strict",
      instances: 16,
      load: 2,
      split: "even",
      durationMs: 8_000,
      events: [
        {
          at: 2_000,
          run: async (ctx) => {
            const cluster = new Cluster(ports.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })));
            const { pid } = await primaryOf(cluster, ctx.namespace);
            await cluster.quit();
            process.kill(pid, "SIGKILL");
            ctx.marks.killedAt = Date.now();
          },
        },
      ],
    });
    console.log(`strict with a primary killed: over ${pct(kill.over)}, util ${(100 * kill.util).toFixed(0)} %`);

    const load = { start: loadAtStart, end: loadavg()[0] as number };
    lines.push(...table(results, { overhead, high, reach, downWorst, downFor, kill, cpu, load }), "", `${scheduling}.`);
  } finally {
    for (const p of primaries) p.disconnect();
    // the last run SIGKILLs a primary: the cluster is not fit for another section, so it is stopped
    // even when `npm run bench` started it
    await stopCluster({ basePort: BASE_PORT });
  }
  return lines;
}

function table(
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
    "Redis CPU of `lua/quota-sync.lua` per key updated (`scripts/bench/quota-sync-cpu.ts`, on the bench cluster before the client runs):",
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

/** Replaces the text between `<!-- bench:quotas -->` and `<!-- /bench:quotas -->` in docs/quotas.md. */
export function publishQuotas(lines: string[]): void {
  if (GRID_ONLY) return; // no table: the docs keep theirs
  const path = "docs/quotas.md";
  const text = readFileSync(path, "utf8");
  const start = "<!-- bench:quotas -->";
  const end = "<!-- /bench:quotas -->";
  const from = text.indexOf(start);
  const to = text.indexOf(end);
  if (from < 0 || to < from) throw new Error(`${path} has no ${start} ... ${end} section`);
  writeFileSync(path, `${text.slice(0, from + start.length)}\n${lines.join("\n")}\n${text.slice(to)}`);
  console.log(`updated the quotas section of ${path}`);
}

if (isMain(import.meta)) {
  runQuotasBench()
    .then((lines) => {
      console.log(lines.join("\n"));
      publishQuotas(lines);
      process.exit(0);
    })
    .catch((error) => {
      console.error(error);
      process.exit(1);
    });
}
