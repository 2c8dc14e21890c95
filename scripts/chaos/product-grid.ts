// The campaign pipeline's and the check API's part of the chaos grid: one scenario per nemesis and product
// (`pipeline/<nemesis>`, `check-api/<nemesis>`), run on the harness's own cluster beside what each product
// needs (the pipeline's queues and consumer processes; the check API in a process of its own).
import { closeSync, mkdirSync, openSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Engine } from "../redis-cluster.ts";
import { ClusterControl } from "./cluster-control.ts";
import { PipelineStack } from "./pipeline-stack.ts";
import { PIPELINE_POLICY_WITH_QUIET } from "./quiet-input.ts";
import { CHECK_API_NEMESES, type CheckApiResult, runCheckApiScenario } from "./run-check-api.ts";
import { PIPELINE_NEMESES, type PipelineResult, runPipelineScenario } from "./run-pipeline.ts";
import {
  QUIET_NEMESES,
  type QuietPipelineResult,
  runQuietPipelineScenario,
  SCHEDULER_NEMESES,
} from "./run-quiet-pipeline.ts";
import { KNOWN_FAILING } from "./scenarios.ts";
import { ChaosStack } from "./stack.ts";

/** A scenario that threw (a nemesis or the harness): nothing to judge. */
export interface RunFailure {
  figures: undefined;
  verdicts: { rule: "run"; pass: false; detail: string }[];
  pass: false;
}

interface Common {
  id: string;
  known: string | undefined;
  wallMs: number;
}

export type ProductResult =
  | (Common & { product: "pipeline"; check: PipelineResult["check"] | RunFailure })
  | (Common & { product: "pipeline-quiet"; check: QuietPipelineResult["check"] | RunFailure })
  | (Common & {
      product: "check-api";
      check: CheckApiResult["check"] | RunFailure;
      answers?: CheckApiResult["answers"];
    });

export interface ProductScenario {
  id: string;
  product: "pipeline" | "pipeline-quiet" | "check-api";
  nemesis: string;
  summary: string;
}

export const PRODUCT_SCENARIOS: readonly ProductScenario[] = [
  ...PIPELINE_NEMESES.map((n) => ({
    id: `pipeline/${n.name}`,
    product: "pipeline" as const,
    nemesis: n.name,
    summary: n.summary,
  })),
  ...QUIET_NEMESES.map((n) => ({
    id: `pipeline-quiet/${n.name}`,
    product: "pipeline-quiet" as const,
    nemesis: n.name,
    summary: `quiet hours and deferral (zones, inapp 21:00-08:00, defer 8 s; SQS delays): ${n.summary}`,
  })),
  ...QUIET_NEMESES.filter((n) => SCHEDULER_NEMESES.includes(n.name)).map((n) => ({
    id: `pipeline-quiet/${n.name}/scheduler`,
    product: "pipeline-quiet" as const,
    nemesis: n.name,
    summary: `the same, deferrals in the local scheduler's bucket fired by the harness's clock: ${n.summary}`,
  })),
  ...CHECK_API_NEMESES.map((n) => ({
    id: `check-api/${n.name}`,
    product: "check-api" as const,
    nemesis: n.name,
    summary: n.summary,
  })),
];

/**
 * The pipeline's and the check API's scenarios in the seeded short run (test/integration/chaos/
 * pipeline-short-run.test.ts and check-api-short-run.test.ts): ones the products hold today.
 */
export const PRODUCT_SHORT_RUN: readonly string[] = [
  "pipeline/kill-9-primary",
  "pipeline/flushall",
  "pipeline/redelivery-storm",
  "pipeline/consumer-killed-mid-batch",
  "pipeline-quiet/redelivery-storm",
  "check-api/kill-9-primary",
];

export function selectProductScenarios(filters: readonly string[]): ProductScenario[] {
  if (filters.length === 0) return [...PRODUCT_SCENARIOS];
  return PRODUCT_SCENARIOS.filter((s) => filters.some((f) => s.id === f || s.id.includes(f)));
}

export interface ProductGridOptions {
  scenarios: readonly ProductScenario[];
  basePort: number;
  engine: Engine;
  seed: number;
  onResult?: (result: ProductResult, index: number) => void;
}

export async function runProductGrid(options: ProductGridOptions): Promise<ProductResult[]> {
  const dir = resolve(".local", "chaos", String(options.basePort));
  mkdirSync(dir, { recursive: true });
  const logFile = openSync(join(dir, "processes.log"), "a");
  const cluster = new ClusterControl(options.basePort, options.engine);
  await cluster.start();
  const wants = (product: ProductScenario["product"]) => options.scenarios.some((s) => s.product === product);
  const pipeline = wants("pipeline") || wants("pipeline-quiet") ? new PipelineStack(cluster.nodes, logFile) : undefined;
  const checkApi = wants("check-api") ? new ChaosStack(cluster.nodes, logFile, "all") : undefined;
  const results: ProductResult[] = [];
  const runId = Date.now().toString(36);
  try {
    await pipeline?.start(PIPELINE_POLICY_WITH_QUIET);
    await checkApi?.start();
    for (const [index, scenario] of options.scenarios.entries()) {
      const known = KNOWN_FAILING[scenario.id];
      const parts = { cluster, runId, index, seed: options.seed, pipeline, checkApi };
      const result = await runOne(scenario, parts, known).catch(async (error: unknown): Promise<ProductResult> => {
        // the grid goes on: the nodes resumed, the cluster healthy again, the failure in the table
        cluster.signalAll("SIGCONT");
        await cluster.waitReady().catch(() => {});
        const detail = error instanceof Error ? error.message : String(error);
        const check: RunFailure = { figures: undefined, verdicts: [{ rule: "run", pass: false, detail }], pass: false };
        return { product: scenario.product, id: scenario.id, known, wallMs: 0, check };
      });
      results.push(result);
      options.onResult?.(result, index);
    }
  } finally {
    cluster.signalAll("SIGCONT");
    await pipeline?.stop();
    await checkApi?.stop();
    await cluster.stop();
    closeSync(logFile);
  }
  return results;
}

async function runOne(
  scenario: ProductScenario,
  parts: {
    cluster: ClusterControl;
    runId: string;
    index: number;
    seed: number;
    pipeline: PipelineStack | undefined;
    checkApi: ChaosStack | undefined;
  },
  known: string | undefined,
): Promise<ProductResult> {
  const named = <N extends { name: string }>(list: readonly N[]) => {
    const found = list.find((n) => n.name === scenario.nemesis);
    if (!found) throw new Error(`no nemesis ${scenario.nemesis}`);
    return found;
  };
  if (scenario.product === "pipeline") {
    const result = await runPipelineScenario(
      named(PIPELINE_NEMESES),
      { ...parts, stack: parts.pipeline as PipelineStack },
      known,
    );
    return { product: "pipeline", id: result.id, known, wallMs: result.wallMs, check: result.check };
  }
  if (scenario.product === "pipeline-quiet") {
    const path = scenario.id.endsWith("/scheduler") ? "scheduler" : "sqs-delay";
    const result = await runQuietPipelineScenario(
      named(QUIET_NEMESES),
      { ...parts, stack: parts.pipeline as PipelineStack },
      path,
    );
    return { product: "pipeline-quiet", id: result.id, known, wallMs: result.wallMs, check: result.check };
  }
  const result = await runCheckApiScenario(
    named(CHECK_API_NEMESES),
    { ...parts, stack: parts.checkApi as ChaosStack },
    known,
  );
  return {
    product: "check-api",
    id: result.id,
    known,
    wallMs: result.wallMs,
    check: result.check,
    answers: result.answers,
  };
}
