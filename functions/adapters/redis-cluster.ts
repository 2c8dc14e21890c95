// The Redis Cluster adapter: an ioredis Cluster configured so it never waits forever, and the CapStore
// over it, which retries a script call through failovers within a deadline.
import { Cluster, type ClusterNode } from "ioredis";
import type { CapStore } from "../core/capping/cap-sends-script.ts";
import type { LimitStore } from "../core/limits/limit-script.ts";
import type { Algorithm } from "../core/limits/limit-specs.ts";
import { StoreUnavailableError } from "../core/shared/errors.ts";
import { limitCommand, luaScripts } from "./lua-scripts.ts";

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
  /**
   * Send the commands issued in one tick as one pipeline per node (default true): what a batch of many
   * script calls wants. A client with one command at a time (a check API environment takes one invocation
   * at a time) only pays the pipeline's bookkeeping for it.
   */
  autoPipelining?: boolean;
}

type CapSendsCommand = (...keysAndArgs: (string | Buffer)[]) => Promise<Buffer>;
type LimitsCommand = (...keysAndArgs: string[]) => Promise<number[]>;
export type TollgateCluster = Cluster &
  Record<`capSends${number}Buffer`, CapSendsCommand> &
  Record<`limits${number}` | `limit:${string}`, LimitsCommand>;

export function createRedisCluster(config: RedisClusterConfig): TollgateCluster {
  const cluster = new Cluster(config.nodes, {
    scripts: luaScripts,
    // Commands issued in one tick go out as one pipeline per node, all nodes in parallel.
    enableAutoPipelining: config.autoPipelining ?? true,
    // Give up reconnecting after ~10 attempts instead of queueing commands forever.
    clusterRetryStrategy: (times) => (times > 10 ? null : Math.min(100 * times, 1_000)),
    slotsRefreshTimeout: 1_000,
    // ElastiCache with TLS: keep the hostname so the certificate matches (never disable the check).
    ...(config.tls
      ? { dnsLookup: (address: string, done: (error: null, address: string) => void) => done(null, address) }
      : {}),
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
  /**
   * "transient" (default): every transient error, safe for campaign sends, which are idempotent.
   * "redirects": only replies proving the call did not run, for checks without a campaign ID, which
   * would count twice if a lost attempt had run.
   */
  retryOn?: "transient" | "redirects";
}

/**
 * Runs `call` until it succeeds, a non-retryable error, or the deadline. Between attempts the slot map is
 * refreshed: ioredis never re-sends a pipelined write after MOVED/ASK or a dropped connection.
 */
async function withRetries<T>(
  cluster: TollgateCluster,
  call: () => Promise<T>,
  options: {
    deadlineMs: number;
    retryable: (error: unknown) => boolean;
    onRetry: (error: Error) => void;
    what: string;
  },
): Promise<T> {
  const deadline = Date.now() + options.deadlineMs;
  // After its bounded reconnect attempts ioredis ends the client for good; a warm container outlives
  // a Redis outage, so a call after one starts the client again.
  if (cluster.status === "end") cluster.connect().catch(() => {});
  for (let attempt = 1; ; attempt++) {
    try {
      return await withDeadline(call(), deadline - Date.now());
    } catch (error) {
      if (!options.retryable(error) || Date.now() + backoff(attempt) >= deadline) {
        throw new StoreUnavailableError(`${options.what} failed: ${(error as Error).message}`, { cause: error });
      }
      options.onRetry(error as Error);
      cluster.refreshSlotsCache();
      await sleep(backoff(attempt));
    }
  }
}

/**
 * Runs cap-sends, by default retrying every transient error until the deadline. That is safe for campaign
 * sends because the script is idempotent: a send already counted by a lost attempt comes back as a
 * duplicate, never counted twice.
 */
export class RedisCapStore implements CapStore {
  private readonly deadlineMs: number;
  private readonly onRetry: (error: Error) => void;
  private readonly retryable: (error: unknown) => boolean;

  constructor(
    private readonly cluster: TollgateCluster,
    options: RedisCapStoreOptions = {},
  ) {
    this.deadlineMs = options.deadlineMs ?? 6_000;
    this.onRetry = options.onRetry ?? (() => {});
    this.retryable = options.retryOn === "redirects" ? isRedirect : isTransient;
  }

  capSends(keys: readonly string[], args: readonly (string | Buffer)[]): Promise<Buffer> {
    const command = this.cluster[`capSends${keys.length}Buffer`];
    if (!command) throw new Error(`no cap-sends script for ${keys.length} keys`);
    return withRetries(this.cluster, () => command.call(this.cluster, ...keys, ...args), {
      deadlineMs: this.deadlineMs,
      retryable: this.retryable,
      onRetry: this.onRetry,
      what: `cap-sends on ${keys[0]}`,
    });
  }
}

/**
 * Runs the rate-limit scripts. Charging is not idempotent, so only replies that prove the call did not run
 * (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) are retried; a timeout or a dropped connection fails the request.
 */
export class RedisLimitStore implements LimitStore {
  constructor(
    private readonly cluster: TollgateCluster,
    private readonly options: { deadlineMs: number; onRetry?: (error: Error) => void },
  ) {}

  runLimit(algorithm: Algorithm, key: string, args: readonly string[]): Promise<number[]> {
    const command = this.cluster[limitCommand(algorithm)];
    if (!command) throw new Error(`no limit script for ${algorithm}`);
    return withRetries(this.cluster, () => command.call(this.cluster, key, ...args), {
      deadlineMs: this.options.deadlineMs,
      retryable: isRedirect,
      onRetry: this.options.onRetry ?? (() => {}),
      what: `limit on ${key}`,
    });
  }

  runLimits(keys: readonly string[], args: readonly string[]): Promise<number[]> {
    const command = this.cluster[`limits${keys.length}`];
    if (!command) throw new Error(`no limits script for ${keys.length} keys`);
    return withRetries(this.cluster, () => command.call(this.cluster, ...keys, ...args), {
      deadlineMs: this.options.deadlineMs,
      retryable: isRedirect,
      onRetry: this.options.onRetry ?? (() => {}),
      what: `limits on ${keys[0]}`,
    });
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

/** Cluster replies that prove the command did not run: it is safe to send again, idempotent or not. */
function isRedirect(error: unknown): boolean {
  return (
    error instanceof Error && error.name === "ReplyError" && /^(MOVED|ASK|TRYAGAIN|CLUSTERDOWN) /.test(error.message)
  );
}

const backoff = (attempt: number) => Math.min(50 * 2 ** (attempt - 1), 500);
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Rejects when `promise` has not settled `ms` after the call. A busy event loop runs due timers before it
 * reads its sockets, so a reply that arrived in time would lose to its own deadline (and the request,
 * charged, would be told "no reply"): the deadline reads pending I/O once (setImmediate runs after the
 * poll phase) before it gives up.
 */
function withDeadline<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let immediate: NodeJS.Immediate | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => {
        immediate = setImmediate(() => reject(new Error(`no reply within ${Math.max(ms, 0)} ms`)));
      },
      Math.max(ms, 0),
    );
  });
  return Promise.race([promise, timeout]).finally(() => {
    clearTimeout(timer);
    clearImmediate(immediate);
  });
}
