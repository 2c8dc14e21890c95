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
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { Cluster, Redis } from "ioredis";
import { createRedisCluster } from "../../functions/adapters/redis-cluster.ts";
import { encodeRule, slotGroupKeys, slotGroupPrefix } from "../../sdk/src/protocol/index.ts";
import { isMain } from "../is-main.ts";
import { stopCluster } from "../redis-cluster.ts";
import { runQuotaSyncCpu } from "./quota-sync-cpu.ts";
import { checkOverhead } from "./quotas-overhead.ts";
import { type Design, L, LONG_W, QUICK, type Result, runScenario, type Scenario, W } from "./quotas-run.ts";
import { maxInWindow } from "./quotas-stats.ts";
import { pct, quotasTable } from "./quotas-table.ts";
import { primaryPortOf } from "./redis-stats.ts";
import { BASE_PORT, seedNodes, startBenchCluster } from "./stack.ts";
import { replaceBetween } from "./tables.ts";
import { sleep } from "./timing.ts";

const GRID_ONLY = process.env.BENCH_QUOTAS_GRID_ONLY === "1";
const listEnv = (name: string): string[] | undefined => process.env[name]?.split(",");

/** The primary serving the rule's slot group, with its pid from the pidfile scripts/redis-cluster.ts wrote. */
async function primaryOf(cluster: Cluster, namespace: string): Promise<{ port: number; pid: number }> {
  const port = (await primaryPortOf(cluster, `${slotGroupPrefix(namespace, "api", 0)}:cfg`))!;
  return { port, pid: pidOf(port) };
}

function pidOf(port: number): number {
  const dir = resolve(join(".local", "redis-cluster", String(BASE_PORT), String(port), "redis.pid"));
  return Number(readFileSync(dir, "utf8").trim());
}

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
  const { ports, scheduling } = await startBenchCluster();
  const primaries: Redis[] = [];
  const lines: string[] = [];
  try {
    const probe = new Cluster(seedNodes(ports));
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
    const cpuCluster = createRedisCluster({ nodes: seedNodes(ports) });
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
            const cluster = new Cluster(seedNodes(ports));
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
            const cluster = new Cluster(seedNodes(ports));
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
    lines.push(
      ...quotasTable(results, { overhead, high, reach, downWorst, downFor, kill, cpu, load }),
      "",
      `${scheduling}.`,
    );
  } finally {
    for (const p of primaries) p.disconnect();
    // the last run SIGKILLs a primary: the cluster is not fit for another section, so it is stopped
    // even when `npm run bench` started it
    await stopCluster({ basePort: BASE_PORT });
  }
  return lines;
}

/** Replaces the text between `<!-- bench:quotas -->` and `<!-- /bench:quotas -->` in docs/quotas.md. */
export function publishQuotas(lines: string[]): void {
  if (GRID_ONLY) return; // no table: the docs keep theirs
  replaceBetween("docs/quotas.md", "<!-- bench:quotas -->", "<!-- /bench:quotas -->", lines.join("\n"));
  console.log("updated the quotas section of docs/quotas.md");
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
