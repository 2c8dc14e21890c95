// Connecting tests to the local Redis Cluster that test/global-setup.ts starts, with a key namespace per test.
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { createRedisCluster, type TollgateCluster } from "../../functions/adapters/redis-cluster.ts";

export const basePort = Number(process.env.REDIS_CLUSTER_BASE_PORT ?? 7000);
export const clusterPorts = Array.from({ length: 6 }, (_, i) => basePort + i);

export function connectCluster(): TollgateCluster {
  return createRedisCluster({ nodes: clusterPorts.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })) });
}

/**
 * The cluster's clock now (TIME on the first primary), in ms: what the scripts measure key lifetimes by. A test
 * that dates requests relative to the server reads it here, not from its own clock, which may disagree (a
 * run with the test processes' clock shifted, `npm run test:shifted`). Synchronous, for module-level times.
 */
export function serverClockNow(): number {
  const [seconds, micros] = execFileSync("redis-cli", ["-h", "127.0.0.1", "-p", String(basePort), "TIME"], {
    encoding: "utf8",
  })
    .trim()
    .split(/\s+/)
    .map(Number);
  return (seconds as number) * 1000 + Math.floor((micros as number) / 1000);
}

/** Keys of one test never meet another's: no FLUSHALL between tests. */
export function uniqueNamespace(): string {
  return `t-${randomBytes(5).toString("hex")}`;
}

/** The primaries among `nodes` (one client per cluster node), each with its node ID and the slot ranges it serves. */
export async function primariesOf(nodes: readonly Redis[]) {
  const found: { node: Redis; id: string; slots: [number, number][] }[] = [];
  for (const node of nodes) {
    if ((await node.role())[0] !== "master") continue;
    const id = (await node.call("CLUSTER", "MYID")) as string;
    const shards = (await node.call("CLUSTER", "SLOTS")) as [number, number, [string, number, string]][];
    const slots = shards.filter(([, , owner]) => owner[2] === id).map(([from, to]) => [from, to] as [number, number]);
    found.push({ node, id, slots });
  }
  return found;
}
