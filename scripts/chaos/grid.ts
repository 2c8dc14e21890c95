// Runs a list of chaos scenarios on one harness: its own Redis Cluster (a base port of its own, either
// engine), the S3 emulator and the QuotaSync function behind the fault proxy, then stops what it started.
import { closeSync, mkdirSync, openSync } from "node:fs";
import { join, resolve } from "node:path";
import { hrtime } from "node:process";
import type { Engine } from "../redis-cluster.ts";
import { ClusterControl } from "./cluster-control.ts";
import { type RunSettings, runScenario, type ScenarioResult } from "./run-scenario.ts";
import { KNOWN_FAILING, type Scenario } from "./scenarios.ts";
import { ChaosStack } from "./stack.ts";
import { aclSetUserArgs, CHAOS_TENANTS } from "./tenants.ts";
import { runFailed } from "./verdicts.ts";

export interface GridOptions extends Partial<Omit<RunSettings, "dir" | "logFile">> {
  scenarios: readonly Scenario[];
  basePort: number;
  engine: Engine;
  /** Told of each result as it comes. */
  onResult?: (result: ScenarioResult, index: number) => void;
}

/** The harness cluster's base port: CHAOS_BASE_PORT, else REDIS_CLUSTER_BASE_PORT + 100 (default 7100). */
export function chaosBasePort(env: NodeJS.ProcessEnv = process.env): number {
  if (env.CHAOS_BASE_PORT) return Number(env.CHAOS_BASE_PORT);
  return Number(env.REDIS_CLUSTER_BASE_PORT ?? 7000) + 100;
}

export async function runGrid(options: GridOptions): Promise<ScenarioResult[]> {
  const dir = resolve(".local", "chaos", String(options.basePort));
  mkdirSync(dir, { recursive: true });
  const logFile = openSync(join(dir, "processes.log"), "a");
  const settings: RunSettings = {
    seed: options.seed ?? 1,
    instances: options.instances ?? 3,
    max: options.max ?? 100,
    syncIntervalMs: options.syncIntervalMs ?? 50,
    dir,
    logFile,
  };
  const cluster = new ClusterControl(options.basePort, options.engine);
  await cluster.start();
  // the tenant scenarios' instances connect as their tenant's own user (kept on nodes a nemesis restarts)
  await cluster.setUsers(CHAOS_TENANTS.map(aclSetUserArgs));
  const stack = new ChaosStack(cluster.nodes, logFile);
  const results: ScenarioResult[] = [];
  try {
    await stack.start();
    const parts = { cluster, stack, origin: hrtime.bigint(), runId: Date.now().toString(36) };
    for (const [index, scenario] of options.scenarios.entries()) {
      const result = await runScenario(scenario, index, settings, parts).catch(
        async (error: unknown): Promise<ScenarioResult> => {
          // the grid goes on: the nodes resumed, the cluster healthy again, the failure in the table
          cluster.signalAll("SIGCONT");
          await cluster.waitReady().catch(() => {});
          return {
            scenario,
            check: runFailed(error),
            known: KNOWN_FAILING[scenario.id],
            notReady: 0,
            syncErrors: 0,
            lastError: undefined,
            wallMs: 0,
          };
        },
      );
      results.push(result);
      options.onResult?.(result, index);
    }
  } finally {
    // a nemesis interrupted mid-way must not leave the nodes stopped
    cluster.signalAll("SIGCONT");
    await stack.stop();
    await cluster.stop();
    closeSync(logFile);
  }
  return results;
}
