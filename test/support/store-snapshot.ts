// Every key of a namespace on a Redis Cluster with its value and expiry, as DUMP and PEXPIRETIME give them:
// two snapshots are equal only if nothing under the namespace was written between them.
import type { TollgateCluster } from "../../functions/adapters/redis-cluster.ts";

export async function namespaceSnapshot(cluster: TollgateCluster, namespace: string): Promise<Map<string, string>> {
  const snapshot = new Map<string, string>();
  for (const node of cluster.nodes("master")) {
    let cursor = "0";
    do {
      const [next, keys] = await node.scan(cursor, "MATCH", `${namespace}:*`, "COUNT", 1000);
      cursor = next;
      for (const key of keys) {
        const [value, expiresAt] = await Promise.all([
          node.dumpBuffer(key),
          node.call("PEXPIRETIME", key) as Promise<number>,
        ]);
        snapshot.set(key, `${expiresAt} ${value?.toString("base64")}`);
      }
    } while (cursor !== "0");
  }
  return snapshot;
}
