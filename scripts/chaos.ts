// `npm run chaos`: the Quotas fault harness (docs/chaos.md). Starts its own Redis Cluster, the S3 emulator and
// the QuotaSync function behind a fault proxy, runs each scenario (a nemesis on one mode and one transport)
// with SDK instances as separate processes, judges every history against the contract and prints the grid.
//
//   npm run chaos -- [--short] [--scenario <id or part>...] [--seed <n>] [--engine redis|valkey] [--write] [--list]
import { appendFileSync, mkdirSync } from "node:fs";
import { Command, InvalidArgumentError } from "commander";
import { replaceBetween, today } from "./bench/tables.ts";
import { chaosBasePort, runGrid } from "./chaos/grid.ts";
import { failures, gridTable, verdictCell } from "./chaos/report.ts";
import { SCENARIOS, SHORT_RUN, selectScenarios } from "./chaos/scenarios.ts";
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
  let scenarios = selectScenarios(options.scenario ?? []);
  if (options.short) scenarios = scenarios.filter((s) => SHORT_RUN.includes(s.id));
  if (options.list) {
    for (const s of scenarios) console.log(`${s.id}\t${s.nemesis.summary}`);
    return;
  }
  const basePort = chaosBasePort();
  console.error(
    `[chaos] ${scenarios.length} of ${SCENARIOS.length} scenarios, seed ${options.seed}, ${engine} on ${basePort}`,
  );
  const started = Date.now();
  // every result as one JSON line too, for a closer look than the table gives
  mkdirSync(".local/chaos", { recursive: true });
  const jsonLines = `.local/chaos/results-${new Date(started).toISOString().replace(/[:.]/g, "-")}.jsonl`;
  const results = await runGrid({
    scenarios,
    basePort,
    engine,
    seed: options.seed,
    onResult: (result, i) => {
      const { scenario, ...rest } = result;
      appendFileSync(jsonLines, `${JSON.stringify({ id: scenario.id, ...rest })}\n`);
      console.error(
        `[chaos] ${i + 1}/${scenarios.length} ${result.scenario.id}: ${verdictCell(result)} (${Math.round(result.wallMs / 1000)} s)`,
      );
    },
  });
  const table = gridTable(results);
  console.log(table);
  const failed = failures(results);
  if (failed.length > 0) console.log(`\n${failed.join("\n")}`);
  if (options.write) {
    const command = `npm run chaos -- --seed ${options.seed}${options.short ? " --short" : ""}${(options.scenario ?? []).map((s) => ` --scenario ${s}`).join("")} --write`;
    const minutes = Math.round((Date.now() - started) / 60_000);
    replaceBetween(
      DOC,
      "<!-- chaos:grid -->",
      "<!-- /chaos:grid -->",
      `Run: ${today()}, \`${command}\`, ${engine}, ${minutes} min; L = 100 per 1 s, 3 instances, 2× the limit unless the nemesis says otherwise.\n\n${table}`,
    );
  }
  if (results.some((r) => !r.check.pass && !r.known)) process.exitCode = 1;
}

if (isMain(import.meta)) {
  main(process.argv).catch((error: unknown) => {
    console.error(error instanceof Error ? (error.stack ?? error.message) : error);
    process.exitCode = 1;
  });
}
