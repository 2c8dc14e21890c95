// `npm run chaos`: the fault harness (docs/chaos.md). Starts its own Redis Cluster, the S3 emulator and the
// QuotaSync function behind a fault proxy, runs each Quotas scenario (a nemesis on one mode and one transport)
// with SDK instances as separate processes, then each campaign pipeline and check API scenario (consumer
// processes, the check API in a process of its own), judges every run against the contract and prints the grid.
//
//   npm run chaos -- [--short] [--scenario <id or part>...] [--seed <n>] [--engine redis|valkey] [--write] [--list]
import { appendFileSync, mkdirSync } from "node:fs";
import { Command, InvalidArgumentError } from "commander";
import { replaceBetween, today } from "./bench/tables.ts";
import { chaosBasePort, runGrid } from "./chaos/grid.ts";
import {
  PRODUCT_SCENARIOS,
  PRODUCT_SHORT_RUN,
  type ProductResult,
  runProductGrid,
  selectProductScenarios,
} from "./chaos/product-grid.ts";
import {
  checkApiTable,
  pipelineTable,
  productFailures,
  productVerdictCell,
  quietTable,
} from "./chaos/product-report.ts";
import { failures, gridTable, verdictCell } from "./chaos/report.ts";
import type { ScenarioResult } from "./chaos/run-scenario.ts";
import { SCENARIOS, SHORT_RUN } from "./chaos/scenarios.ts";
import { isMain } from "./is-main.ts";
import { ENGINES, type Engine, engineOf } from "./redis-cluster.ts";

const DOC = "docs/chaos.md";

function integer(text: string): number {
  if (!/^[0-9]{1,9}$/.test(text)) throw new InvalidArgumentError("expected a whole number");
  return Number(text);
}

async function main(argv: string[]): Promise<void> {
  const program = new Command("chaos")
    .option("--short", "only the short run's scenarios (SHORT_RUN in scripts/chaos/scenarios.ts)")
    .option("--scenario <id...>", "scenarios whose id contains one of these (e.g. flushall, strict/http)")
    .option("--seed <n>", "seed of the arrival schedules", integer, 1)
    .option("--engine <engine>", `${ENGINES.join(" | ")} (default: TOLLGATE_ENGINE or redis)`)
    .option("--write", `write the grid into ${DOC} (between its chaos:grid markers)`)
    .option("--list", "list the scenarios and exit")
    .parse(argv);
  const options = program.opts<{
    short?: boolean;
    scenario?: string[];
    seed: number;
    engine?: string;
    write?: boolean;
    list?: boolean;
  }>();
  const engine: Engine = engineOf(options.engine ? { TOLLGATE_ENGINE: options.engine } : process.env);
  const filters = options.scenario ?? [];
  let scenarios =
    filters.length === 0 ? [...SCENARIOS] : SCENARIOS.filter((s) => filters.some((f) => s.id.includes(f)));
  let products = selectProductScenarios(filters);
  if (options.short) {
    scenarios = scenarios.filter((s) => SHORT_RUN.includes(s.id));
    products = products.filter((s) => PRODUCT_SHORT_RUN.includes(s.id));
  }
  if (scenarios.length + products.length === 0)
    throw new Error(`--scenario: no scenario matches ${filters.join(", ")}`);
  if (options.list) {
    for (const s of scenarios) console.log(`${s.id}\t${s.nemesis.summary}`);
    for (const s of products) console.log(`${s.id}\t${s.summary}`);
    return;
  }
  const basePort = chaosBasePort();
  const total = SCENARIOS.length + PRODUCT_SCENARIOS.length;
  const chosen = scenarios.length + products.length;
  console.error(`[chaos] ${chosen} of ${total} scenarios, seed ${options.seed}, ${engine} on ${basePort}`);
  const started = Date.now();
  // every result as one JSON line too, for a closer look than the table gives
  mkdirSync(".local/chaos", { recursive: true });
  const jsonLines = `.local/chaos/results-${new Date(started).toISOString().replace(/[:.]/g, "-")}.jsonl`;
  const results: ScenarioResult[] =
    scenarios.length === 0
      ? []
      : await runGrid({
          scenarios,
          basePort,
          engine,
          seed: options.seed,
          onResult: (result, i) => {
            const { scenario, ...rest } = result;
            appendFileSync(jsonLines, `${JSON.stringify({ id: scenario.id, ...rest })}\n`);
            console.error(
              `[chaos] ${i + 1}/${chosen} ${result.scenario.id}: ${verdictCell(result)} (${Math.round(result.wallMs / 1000)} s)`,
            );
          },
        });
  const productResults: ProductResult[] =
    products.length === 0
      ? []
      : await runProductGrid({
          scenarios: products,
          basePort,
          engine,
          seed: options.seed,
          onResult: (result, i) => {
            const { id, product, known, wallMs, check } = result;
            appendFileSync(jsonLines, `${JSON.stringify({ id, product, known, wallMs, check })}\n`);
            console.error(
              `[chaos] ${scenarios.length + i + 1}/${chosen} ${id}: ${productVerdictCell(result)} (${Math.round(wallMs / 1000)} s)`,
            );
          },
        });
  const minutes = Math.round((Date.now() - started) / 60_000);
  const command = `npm run chaos -- --seed ${options.seed}${options.short ? " --short" : ""}${filters.map((s) => ` --scenario ${s}`).join("")} --write`;
  if (results.length > 0) {
    const table = gridTable(results);
    console.log(table);
    const failed = failures(results);
    if (failed.length > 0) console.log(`\n${failed.join("\n")}`);
    if (options.write)
      replaceBetween(
        DOC,
        "<!-- chaos:grid -->",
        "<!-- /chaos:grid -->",
        `Run: ${today()}, \`${command}\`, ${engine}, ${minutes} min; L = 100 per 1 s, 3 instances, 2× the limit unless the nemesis says otherwise.\n\n${table}`,
      );
  }
  const quietResults = productResults.filter((r) => r.product === "pipeline-quiet");
  if (quietResults.length > 0) {
    const quiet = quietTable(quietResults);
    console.log(`\n**Quiet hours and deferral**\n\n${quiet}`);
    const failedQuiet = productFailures(quietResults);
    if (failedQuiet.length > 0) console.log(`\n${failedQuiet.join("\n")}`);
    if (options.write)
      replaceBetween(
        DOC,
        "<!-- chaos:quiet -->",
        "<!-- /chaos:quiet -->",
        `Run: ${today()}, \`${command}\`, ${engine}, ${minutes} min (the whole command).\n\n${quiet}`,
      );
  }
  if (productResults.some((r) => r.product !== "pipeline-quiet")) {
    const tables = `**Campaign pipeline**\n\n${pipelineTable(productResults)}\n\n**Check API**\n\n${checkApiTable(productResults)}`;
    console.log(`\n${tables}`);
    const failed = productFailures(productResults.filter((r) => r.product !== "pipeline-quiet"));
    if (failed.length > 0) console.log(`\n${failed.join("\n")}`);
    if (options.write)
      replaceBetween(
        DOC,
        "<!-- chaos:products -->",
        "<!-- /chaos:products -->",
        `Run: ${today()}, \`${command}\`, ${engine}, ${minutes} min (the whole command, Quotas scenarios included when it selected any).\n\n${tables}`,
      );
  }
  if ([...results, ...productResults].some((r) => !r.check.pass && !r.known)) process.exitCode = 1;
}

if (isMain(import.meta)) {
  main(process.argv).catch((error: unknown) => {
    console.error(error instanceof Error ? (error.stack ?? error.message) : error);
    process.exitCode = 1;
  });
}
