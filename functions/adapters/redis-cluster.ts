// The Redis Cluster adapter: an ioredis Cluster configured so it never waits forever, and the CapStore
// over it, which retries a script call through failovers within a deadline.
import { Cluster, type ClusterNode } from "ioredis";
import type { CapStore } from "../core/capper.ts";
import { StoreUnavailableError } from "../core/errors.ts";
import { luaScripts } from "./lua-scripts.ts";

export interface RedisClusterConfig {
  /** Startup nodes: the configuration endpoint on ElastiCache, any nodes locally. */
  nodes: ClusterNode[];
  /** TLS (ElastiCache in-transit encryption); hostnames are kept for certificate checks. */
  tls?: boolean;
  username?: string;
  password?: string;
  /** A command written to a node fails after this long. */
  commandTimeoutMs?: number;
  connectTimeoutMs?: number;
}

type CapSendsCommand = (...keysAndArgs: (string | Buffer)[]) => Promise<Buffer>;
export type TollgateCluster = Cluster & { capSendsBuffer: CapSendsCommand };

export function createRedisCluster(config: RedisClusterConfig): TollgateCluster {
  const cluster = new Cluster(config.nodes, {
    scripts: luaScripts,
    // Commands issued in one tick go out as one pipeline per node, all nodes in parallel.
    enableAutoPipelining: true,
    // Give up reconnecting after ~10 attempts instead of queueing commands forever.
    clusterRetryStrategy: (times) => (times > 10 ? null : Math.min(100 * times, 1_000)),
    slotsRefreshTimeout: 1_000,
    // ElastiCache with TLS: keep the hostname so the certificate matches (never disable the check).
    ...(config.tls ? { dnsLookup: (address: string, done: (error: null, address: string) => void) => done(null, address) } : {}),
    redisOptions: {
      ...(config.tls ? { tls: {} } : {}),
      ...(config.username ? { username: config.username } : {}),
      ...(config.password ? { password: config.password } : {}),
      connectTimeout: config.connectTimeoutMs ?? 2_000,
      commandTimeout: config.commandTimeoutMs ?? 2_000,
      maxRetriesPerRequest: 1,
    },
  }) as TollgateCluster;
  // Without a listener, a connection error event would crash the process.
  cluster.on("error", () => {});
  return cluster;
}

export interface RedisCapStoreOptions {
  /** How long one script call may take, retries included, before the batch fails (default 6 s: a failover takes ~3.5 s). */
  deadlineMs?: number;
  /** Told of every transient error that is retried (for logs and metrics). */
  onRetry?: (error: Error) => void;
}

/**
 * Runs cap-sends. A pipelined write is never re-sent by ioredis after MOVED/ASK or a dropped connection,
 * so this retries it, refreshing the slot map, until the deadline. That is safe because the script is
 * idempotent: a send already counted by the lost attempt comes back as a duplicate, never counted twice.
 */
export class RedisCapStore implements CapStore {
  private readonly deadlineMs: number;
  private readonly onRetry: (error: Error) => void;

  constructor(
    private readonly cluster: TollgateCluster,
    options: RedisCapStoreOptions = {},
  ) {
    this.deadlineMs = options.deadlineMs ?? 6_000;
    this.onRetry = options.onRetry ?? (() => {});
  }

  async capSends(keys: readonly string[], args: readonly (string | Buffer)[]): Promise<Buffer> {
    const deadline = Date.now() + this.deadlineMs;
    // After its bounded reconnect attempts ioredis ends the client for good; a warm container outlives
    // a Redis outage, so a call after one starts the client again.
    if (this.cluster.status === "end") this.cluster.connect().catch(() => {});
    for (let attempt = 1; ; attempt++) {
      try {
        return await withDeadline(this.cluster.capSendsBuffer(...keys, ...args), deadline - Date.now());
      } catch (error) {
        if (!isTransient(error) || Date.now() + backoff(attempt) >= deadline) {
          throw new StoreUnavailableError(`cap-sends failed on ${keys[0]}: ${(error as Error).message}`, { cause: error });
        }
        this.onRetry(error as Error);
        this.cluster.refreshSlotsCache();
        await sleep(backoff(attempt));
      }
    }
  }
}

/**
 * Errors worth retrying: cluster topology replies (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, ...), dropped
 * connections and timeouts. A plain `ERR` reply is a bug in the call (bad arguments, a script error):
 * retrying would repeat it.
 */
function isTransient(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  if (error.name === "ReplyError") return !error.message.startsWith("ERR ");
  return true;
}

const backoff = (attempt: number) => Math.min(50 * 2 ** (attempt - 1), 500);
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function withDeadline<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no reply within ${Math.max(ms, 0)} ms`)), Math.max(ms, 0));
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
