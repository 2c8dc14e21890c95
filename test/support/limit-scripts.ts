// Temporary: runs the rate-limit scripts straight through ioredis (replaced by the production protocol
// modules once they exist).
import { readFileSync } from "node:fs";
import { Cluster } from "ioredis";
import { clusterPorts } from "./cluster.ts";

const ALGORITHMS = ["token-bucket", "sliding-window", "sliding-log", "fixed-window", "gcra"] as const;
const load = (name: string) => readFileSync(new URL(`../../lua/${name}.lua`, import.meta.url), "utf8");

export type ScriptCluster = Cluster & Record<string, (...args: string[]) => Promise<number[]>>;

export function connectScripts(): ScriptCluster {
  const scripts: Record<string, { lua: string; numberOfKeys: number }> = {};
  for (const algorithm of ALGORITHMS) {
    scripts[`limit_${algorithm.replace("-", "_")}`] = {
      lua: [load("limit-common"), load(algorithm), load("limit")].join("\n"),
      numberOfKeys: 1,
    };
  }
  const all = [load("limit-common"), ...ALGORITHMS.map(load), load("limits")].join("\n");
  for (let n = 1; n <= 4; n++) scripts[`limits${n}`] = { lua: all, numberOfKeys: n };
  return new Cluster(
    clusterPorts.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })),
    { scripts, enableAutoPipelining: true },
  ) as ScriptCluster;
}

export async function runLimit(
  cluster: ScriptCluster,
  algorithm: string,
  key: string,
  now: number,
  cost: number,
  params: (string | number)[],
) {
  const args = [String(now), String(cost), ...params.map(String)];
  while (args.length < 6) args.push("");
  const command = cluster[`limit_${algorithm.replace("-", "_")}`] as (...a: string[]) => Promise<number[]>;
  const [allowed, limit, remaining, resetAt, retryAfterMs] = await command.call(cluster, key, ...args);
  return { allowed: allowed === 1, limit, remaining, resetAt, retryAfterMs } as {
    allowed: boolean;
    limit: number;
    remaining: number;
    resetAt: number;
    retryAfterMs: number;
  };
}
