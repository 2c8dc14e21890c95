// The server's clock moving on, played on one test's keys: what Redis' own expiry does as its clock advances by
// `ms` (a key whose lifetime ends within it is gone, every other one has `ms` less to live). For tests whose
// function clock is a fixedClock moved by the same `ms`, so that hours pass in a test that takes milliseconds.
// Times and lifetimes in whole seconds keep it exact: the few milliseconds that really pass between calls
// never add up to a second.
import type { TollgateCluster } from "../../functions/adapters/redis-cluster.ts";

/** Moves the server's time on by `ms` for every key of `namespace`; a key without an expiry is an error. */
export async function elapseOnServer(cluster: TollgateCluster, namespace: string, ms: number): Promise<void> {
  for (const node of cluster.nodes("master")) {
    let cursor = "0";
    do {
      const [next, keys] = await node.scan(cursor, "MATCH", `${namespace}:*`, "COUNT", 1000);
      cursor = next;
      for (const key of keys) {
        const ttl = await node.pttl(key);
        if (ttl === -1) throw new Error(`${key} has no expiry: it would outlive every request that can read it`);
        if (ttl < 0) continue;
        if (ttl <= ms) await node.del(key);
        else await node.pexpire(key, ttl - ms);
      }
    } while (cursor !== "0");
  }
}
