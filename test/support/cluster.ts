// Connecting tests to the local Redis Cluster that test/global-setup.ts starts, with a key namespace per test.
import { randomBytes } from "node:crypto";
import { createRedisCluster, type TollgateCluster } from "../../functions/adapters/redis-cluster.ts";

export const basePort = Number(process.env.REDIS_CLUSTER_BASE_PORT ?? 7000);
export const clusterPorts = Array.from({ length: 6 }, (_, i) => basePort + i);

export function connectCluster(): TollgateCluster {
  return createRedisCluster({ nodes: clusterPorts.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })) });
}

/** Keys of one test never meet another's: no FLUSHALL between tests. */
export function uniqueNamespace(): string {
  return `t-${randomBytes(5).toString("hex")}`;
}
