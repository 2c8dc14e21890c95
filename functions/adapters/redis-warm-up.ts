// Opens a cluster client's connections before the first request (a Lambda's init phase): the slot map,
// one connection per primary (TCP, TLS, AUTH) and the Lua scripts compiled on each, so no request pays.
import type { Cluster } from "ioredis";

export interface WarmUpReport {
  /** Every primary answered and holds every script. */
  warm: boolean;
  primaries: number;
  ms: number;
  /** Why not warm: the cluster did not answer within the time given, or refused a command. */
  error?: Error;
}

/**
 * Never throws: a Redis that is down at init must not fail the init (Lambda would then answer every
 * request with an error); requests then meet the usual per-request deadline, and fail closed or open.
 */
export async function warmUp(cluster: Cluster, options: { timeoutMs: number }): Promise<WarmUpReport> {
  const started = performance.now();
  let primaries = 0;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`not ready within ${options.timeoutMs} ms`)), options.timeoutMs);
  });
  const work = async () => {
    await ready(cluster);
    // ioredis connects to a node on its first command only: one command per primary opens them all
    const nodes = cluster.nodes("master");
    primaries = nodes.length;
    const scripts = [...new Set(Object.values(cluster.options.scripts ?? {}).map((script) => script.lua))];
    await Promise.all(
      nodes.map(async (node) => {
        await node.ping();
        // SCRIPT LOAD compiles once per node; the first call on a connection then finds the script cached
        for (const lua of scripts) await node.script("LOAD", lua);
      }),
    );
  };
  try {
    await Promise.race([work(), timeout]);
    return { warm: true, primaries, ms: performance.now() - started };
  } catch (error) {
    return { warm: false, primaries, ms: performance.now() - started, error: error as Error };
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves once the client holds the slot map (status "ready"), however many reconnects that takes. */
function ready(cluster: Cluster): Promise<void> {
  if (cluster.status === "ready") return Promise.resolve();
  // a client that gave up reconnecting starts again, as the stores do on their next call
  if (cluster.status === "end") cluster.connect().catch(() => {});
  return new Promise((resolve) => cluster.once("ready", () => resolve()));
}
