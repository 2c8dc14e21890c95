// `npm run bench`: the capping engine against Grab's per-user design and rate-limiter-flexible, then the
// whole campaign pipeline through the local stack, in one run, on one fresh local Redis Cluster
// (3 primaries + 3 replicas), each figure beside the ceiling measured in the same run. Not a test: it
// asserts nothing, it measures. Each table replaces its marked section of docs/BENCHMARKS.md (the quotas
// table, docs/quotas.md's). One module per section under scripts/bench/, run in this order:
//
//   capping     capping.ts            the dense campaign: engine, Grab per-user, rate-limiter-flexible
//   quiet-hours quiet-hours.ts        the same campaign with zones and quiet hours; a million users deferred
//   workloads   capping-workloads.ts  the engine issue's hostile-but-valid workloads
//   maxima      maxima.ts             every documented maximum's slowest script, beside the layout before
//   pipeline    pipeline.ts           one campaign through the local stack
//   archive     archive-cost.ts       the same campaign with the decision archive off and on
//   what-if     what-if.ts            `campaign what-if` on 10,000,000 users, and the real run it predicts
//   check-api   check-api.ts          the check API in process and over HTTP
//   flood       frequency-flood.ts    32 clients flooding one block: answers by status, slowest script
//   limits      limits-bench.ts       Limiter.check against rate-limiter-flexible
//   quotas      quotas.ts             the Quotas SDK (its own cluster, started after the one above stops)
//
//   npm run bench [-- SECTION]  or BENCH_ONLY=SECTION: that section alone (default all)
//   BENCH_USERS (1000000)  BENCH_WHATIF_USERS (10000000: the what-if section's)  BENCH_CONCURRENCY (4 batches in flight)  BENCH_BASE_PORT (7200)
//   BENCH_WORKLOADS (sparse,week,checks,busy,big,huge: the workloads section's scenarios; default all)
//   BENCH_REDIS_SCHEDULING (fifo: the primaries at real-time priority, as on nodes of their own; or normal)
//   The quotas section's own variables (BENCH_QUOTAS_*) are listed in scripts/bench/quotas.ts.
import { Argument, Command } from "commander";
import { createRedisCluster, type TollgateCluster } from "../functions/adapters/redis-cluster.ts";
import { runArchiveCost } from "./bench/archive-cost.ts";
import { runCapping } from "./bench/capping.ts";
import { runCappingWorkloads } from "./bench/capping-workloads.ts";
import { runCheckApi } from "./bench/check-api.ts";
import { runFrequencyFlood } from "./bench/frequency-flood.ts";
import { runLimitsBench } from "./bench/limits-bench.ts";
import { runMaxima } from "./bench/maxima.ts";
import { runPipeline } from "./bench/pipeline.ts";
import { runQuietHours } from "./bench/quiet-hours.ts";
import { publishQuotas, runQuotasBench } from "./bench/quotas.ts";
import { BASE_PORT, seedNodes, startBenchCluster } from "./bench/stack.ts";
import { replaceBetween } from "./bench/tables.ts";
import { runWhatIf } from "./bench/what-if.ts";
import { stopCluster } from "./redis-cluster.ts";

const SECTIONS = [
  "capping",
  "quiet-hours",
  "workloads",
  "maxima",
  "pipeline",
  "archive",
  "what-if",
  "check-api",
  "flood",
  "limits",
  "quotas",
] as const;
type Section = (typeof SECTIONS)[number];

/** The section asked for (BENCH_ONLY before the command line), or undefined for all of them. */
function chosenSection(argv: readonly string[]): Section | undefined {
  const program = new Command("npm run bench --")
    .description("Measures Tollgate beside its baselines and writes each section's table into the docs.")
    .addArgument(new Argument("[section]", "run this section alone (default: all, in order)").choices(SECTIONS))
    .parse(argv);
  const only = process.env.BENCH_ONLY ?? (program.processedArgs[0] as Section | undefined);
  if (only !== undefined && !SECTIONS.includes(only as Section))
    program.error(`error: BENCH_ONLY '${only}' is not a section (${SECTIONS.join(", ")})`);
  return only as Section | undefined;
}

async function main(only: Section | undefined): Promise<void> {
  const runs = (section: Section) => only === undefined || only === section;
  const local = await startBenchCluster();
  const publish = (section: string, lines: string[]) => publishSection(section, [...lines, "", `${local.scheduling}.`]);
  const nodes = seedNodes(local.ports, local.host);
  const clients: TollgateCluster[] = [];
  const connect = () => {
    // a saturated shared machine can hold a pipeline longer than the production 2 s command timeout
    const client = createRedisCluster({ nodes, commandTimeoutMs: 30_000 });
    clients.push(client);
    return client;
  };
  try {
    let engineRate: number | undefined;
    if (runs("capping")) {
      const { lines, rate } = await runCapping(connect);
      engineRate = rate;
      publish("capping", lines);
    }
    if (runs("quiet-hours")) publish("quiet-hours", await runQuietHours(connect));
    if (runs("workloads")) publish("workloads", await runCappingWorkloads(connect()));
    if (runs("maxima")) publish("maxima", await runMaxima(connect()));
    if (runs("pipeline")) publish("pipeline", await runPipeline(engineRate));
    if (runs("archive")) publish("archive", await runArchiveCost());
    if (runs("what-if")) publish("what-if", await runWhatIf(connect()));
    if (runs("check-api")) publish("check-api", await runCheckApi());
    if (runs("flood")) publish("flood", await runFrequencyFlood());
    if (runs("limits")) publish("limits", await runLimitsBench({ cluster: connect(), primaries: nodes }));
  } finally {
    await Promise.all(clients.map((client) => client.quit().catch(() => {})));
    if (local.started) await stopCluster({ basePort: BASE_PORT });
  }
  // its own cluster on the same ports, started after the one above is stopped (its last run kills a primary)
  if (runs("quotas")) publishQuotas(await runQuotasBench());
}

/** Prints a section's table and puts it between `<!-- bench:NAME:start -->` and `<!-- bench:NAME:end -->`. */
function publishSection(section: string, lines: string[]): void {
  const table = lines.join("\n");
  console.log(`\n${table}\n`);
  replaceBetween("docs/BENCHMARKS.md", `<!-- bench:${section}:start -->`, `<!-- bench:${section}:end -->`, table);
  console.log(`updated the ${section} section of docs/BENCHMARKS.md`);
}

main(chosenSection(process.argv)).catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
