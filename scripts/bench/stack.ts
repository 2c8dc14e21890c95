// Where the bench runs: its Redis Cluster on BENCH_BASE_PORT (7200), 3 primaries + 3 replicas, the primaries
// scheduled as redis-priority.ts says, and the local stack on that cluster for the sections that need it.
import { type LocalStackOptions, startLocalStack } from "../local-stack.ts";
import { startCluster } from "../redis-cluster.ts";
import { schedulePrimaries } from "./redis-priority.ts";

export const BASE_PORT = Number(process.env.BENCH_BASE_PORT ?? 7200);

/** The bench cluster (started unless it is up), its primaries scheduled; `scheduling` is what the tables say of it. */
export async function startBenchCluster() {
  const local = await startCluster({ basePort: BASE_PORT });
  const scheduling = await schedulePrimaries(local.host, local.ports);
  console.log(scheduling);
  return { ...local, scheduling };
}

/** The primaries' addresses among the cluster's ports: the seed nodes of a client. */
export const seedNodes = (ports: readonly number[], host = "127.0.0.1") =>
  ports.slice(0, 3).map((port) => ({ host, port }));

/** The local stack on the bench cluster, its queues named after `queuePrefix`, its keys in a fresh namespace. */
export function startBenchStack(
  options: { queuePrefix: string; namespace: string } & Omit<LocalStackOptions, "queuePrefix">,
) {
  const { namespace, environment, ...rest } = options;
  return startLocalStack({
    redisBasePort: BASE_PORT,
    writeEndpoints: false,
    ...rest,
    environment: { KEY_NAMESPACE: `${namespace}-${Date.now()}`, ...environment },
  });
}
