// Opens a cluster client's connections before the first request (a Lambda's init phase): the slot map,
// one connection per primary (TCP, TLS, AUTH) and the Redis Functions library loaded on each, so no request pays.
import type { Cluster } from "ioredis";
import { loadLibrary } from "../../sdk/src/protocol/index.ts";
import { limitLibrary, quotaLibrary, tollgateLibrary } from "./lua-scripts.ts";

export interface WarmUpReport {
  /** Every primary answered and holds the functions library. */
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
    await Promise.all(nodes.map((node) => node.ping()));
    // compiled once per node (and replicated); a node that holds this version answers at once
    await Promise.all([tollgateLibrary, limitLibrary, quotaLibrary].map((library) => loadLibrary(cluster, library)));
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
