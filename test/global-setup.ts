// Starts the local Redis Cluster for the suite unless one is already running, and stops it afterwards
// only if this run started it.
import { startCluster, stopCluster } from "../scripts/redis-cluster.ts";

export default async function setup(): Promise<() => Promise<void>> {
  const cluster = await startCluster();
  return async () => {
    if (cluster.started) await stopCluster();
  };
}
