// The Redis Cluster adapter: an ioredis Cluster configured so it never waits forever and never re-sends a
// command on its own, and the stores over it, whose calls go through RedisCalls (readiness, deadline,
// jittered retries, circuit breaker, errors classified once).
import { Cluster, type ClusterNode } from "ioredis";
import { fcall, fcallBuffer, hashSlotOf } from "../../sdk/src/protocol/index.ts";
import type { CapStore } from "../core/capping/cap-sends-script.ts";
import { type LimitStore, peeks } from "../core/limits/limit-script.ts";
import type { Algorithm } from "../core/limits/limit-specs.ts";
import { peeksAll } from "../core/limits/limits-script.ts";
import { StoreReplyError } from "../core/shared/errors.ts";
import type { StoreEpochGuard } from "../core/shared/store-epoch.ts";
import { LIMIT_FUNCTIONS, limitLibrary, readerOf, tollgateLibrary } from "./lua-scripts.ts";
import { type CallOptions, RedisCalls, type RedisCircuitOptions } from "./redis-calls.ts";
import { PasswordRenewal } from "./redis-reauth.ts";
import { type Settled, SlotBatcher } from "./slot-batcher.ts";

export interface RedisClusterConfig {
  /** Startup nodes: the configuration endpoint on ElastiCache, any nodes locally. */
  nodes: ClusterNode[];
  /** TLS (ElastiCache in-transit encryption); hostnames are kept for certificate checks. */
  tls?: boolean;
  username?: string;
  password?: string;
  /**
   * The password as it is now (the AUTH secret read again): when Redis refuses the one in use, as after a
   * rotation, the new one is set for the next connections and the refused call sent again (redis-reauth.ts).
   */
  readPassword?: () => Promise<string>;
  /** A command written to a node fails after this long. */
  commandTimeoutMs?: number;
  connectTimeoutMs?: number;
  /**
   * Send the commands issued in one tick as one pipeline per node (default true): what a batch of many
   * script calls wants. A client with one command at a time (a check API environment takes one invocation
   * at a time) only pays the pipeline's bookkeeping for it.
   */
  autoPipelining?: boolean;
  /** The circuit breaker shared by every store over this client. */
  circuit?: RedisCircuitOptions;
}

export type TollgateCluster = Cluster;

/** One RedisCalls (one circuit) per client: every store over the same connections shares its state. */
const callsByCluster = new WeakMap<Cluster, RedisCalls>();

/** The guarded calls of `cluster` (created with default circuit options for a client made elsewhere). */
export function redisCallsOf(cluster: Cluster): RedisCalls {
  let calls = callsByCluster.get(cluster);
  if (!calls) {
    calls = new RedisCalls(cluster);
    callsByCluster.set(cluster, calls);
  }
  return calls;
}

export function createRedisCluster(config: RedisClusterConfig): TollgateCluster {
  const cluster = new Cluster(config.nodes, {
    // Commands issued in one tick go out as one pipeline per node, all nodes in parallel.
    enableAutoPipelining: config.autoPipelining ?? true,
    // Give up reconnecting after ~10 attempts instead of queueing commands forever; jittered, so many
    // containers do not reconnect in step after an outage.
    clusterRetryStrategy: (times) =>
      times > 10 ? null : Math.round(Math.min(100 * times, 1_000) * (0.5 + Math.random())),
    slotsRefreshTimeout: 1_000,
    // ioredis re-sends a command by itself after a dropped connection, CLUSTERDOWN or TRYAGAIN, even after
    // its caller gave up. A dropped connection may come after the command ran (a charge would land
    // twice); the others after the caller answered 503. RedisCalls decides what is sent again, instead.
    retryDelayOnFailover: 0,
    retryDelayOnClusterDown: 0,
    retryDelayOnTryAgain: 0,
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
      // the same rule for a node's own reconnection: unanswered commands are failed, never re-sent
      autoResendUnfulfilledCommands: false,
    },
  });
  // Without a listener, a connection error event would crash the process.
  cluster.on("error", () => {});
  const renewal = config.readPassword ? new PasswordRenewal(cluster, config.readPassword) : undefined;
  callsByCluster.set(cluster, new RedisCalls(cluster, config.circuit, renewal));
  return cluster;
}

export interface RedisCapStoreOptions {
  /** How long one script call may take, retries included, before the batch fails (default 6 s: a failover takes ~3.5 s). */
  deadlineMs?: number;
  /** Told of every failure that is retried (for logs and metrics). */
  onRetry?: (error: Error) => void;
  /**
   * "no-answer" (default): every failure without an answer, safe for campaign sends, which are
   * idempotent. "not-run": only failures proving the call did not run, for checks without a campaign
   * ID, which would count twice if a lost attempt had run.
   */
  retryOn?: CallOptions["retryOn"];
  /** The store epoch: each call declares its slot's epoch key and counts nothing when it is gone (StoreLostError). */
  epoch?: StoreEpochGuard;
}

/**
 * Runs cap-sends (a Redis Function: FCALL, the library loaded again where a node lacks it), by default retrying every failure without an answer until the deadline. That is safe for
 * campaign sends because the script is idempotent: a send already counted by a lost attempt comes back as
 * a duplicate, never counted twice.
 */
export class RedisCapStore implements CapStore {
  private readonly options: CallOptions;
  private readonly epoch: StoreEpochGuard | undefined;

  constructor(
    private readonly cluster: TollgateCluster,
    options: RedisCapStoreOptions = {},
  ) {
    this.options = {
      deadlineMs: options.deadlineMs ?? 6_000,
      retryOn: options.retryOn ?? "no-answer",
      ...(options.onRetry ? { onRetry: options.onRetry } : {}),
    };
    this.epoch = options.epoch;
  }

  /** A peek (ARGV[3], the mode, "peek..."): the reader, which a node past maxmemory still runs. */
  capSends(keys: readonly string[], args: readonly (string | Buffer)[]): Promise<Buffer> {
    if (keys.length !== 1) throw new Error(`cap-sends is given 1 key, not ${keys.length}`);
    const name = String(args[2]).startsWith("peek") ? "capSendsRead" : "capSends";
    const run = (declared: readonly string[]) =>
      redisCallsOf(this.cluster).call(
        `cap-sends on ${keys[0]}`,
        // the state's keys share a tag; the epoch key shares only their slot
        keys,
        () => fcallBuffer(this.cluster, tollgateLibrary, name, declared, args),
        this.options,
      );
    const key = keys[0] as string;
    return this.epoch ? this.epoch.run(key, (epochKey) => run([key, epochKey])) : run(keys);
  }

  stillLost(keys: readonly string[]): Promise<Map<string, unknown>> {
    return this.epoch ? this.epoch.stillLost(keys) : Promise.resolve(new Map());
  }
}

/**
 * Runs the rate-limit scripts. Charging is not idempotent, so only failures that prove the call did not run
 * (never sent, MOVED, ASK, TRYAGAIN, CLUSTERDOWN, ...) are retried; a timeout or a dropped connection
 * fails the request with `mayHaveRun`.
 *
 * The scripts are Redis Functions (limitLibrary): a plain FCALL, which ioredis routes by its first key and
 * follows through MOVED and ASK as any command; a node without the library ("Function not found": it did
 * not run) gets it loaded and the call sent once more (sdk/src/protocol/redis-functions.ts). Not scripts
 * defined on the client: ioredis' script command costs a subclass instance, a closure and a promise more per
 * call, and every defined script is copied into each autopipelined batch
 * (docs/decisions/0020-rate-limit-fast-path.md).
 */
export class RedisLimitStore implements LimitStore {
  private readonly callOptions: CallOptions;
  /** Looked up once: the client's RedisCalls never changes. */
  private readonly calls: RedisCalls;
  private readonly epoch: StoreEpochGuard | undefined;
  /** With `slotBatch`: one limit call in flight per hash slot, the checks of a turn and those arriving meanwhile joined (slot-batcher.ts). */
  private readonly batcher: SlotBatcher<LimitCall, Buffer> | undefined;

  constructor(
    private readonly cluster: Cluster,
    options: {
      deadlineMs: number;
      onRetry?: (error: Error) => void;
      epoch?: StoreEpochGuard;
      /**
       * Several invocations at once in one execution environment (Lambda Managed Instances): POST /v1/limit
       * checks whose keys share a hash slot, made in one turn of the event loop or arriving while a call to
       * that slot is in flight, go together as one call (lua/limit-batch.lua), at most `maxPerCall` a call.
       * Off (undefined): every check its own call.
       */
      slotBatch?: { maxPerCall: number };
    },
  ) {
    this.calls = redisCallsOf(cluster);
    this.epoch = options.epoch;
    this.callOptions = {
      deadlineMs: options.deadlineMs,
      retryOn: "not-run",
      ...(options.onRetry ? { onRetry: options.onRetry } : {}),
    };
    this.batcher = options.slotBatch
      ? new SlotBatcher<LimitCall, Buffer>({
          one: (call) => this.runOne(call.algorithm, call.key, call.args, call.slot),
          many: (calls) => this.runBatch(calls),
          maxPerCall: options.slotBatch.maxPerCall,
        })
      : undefined;
  }

  /** A peek (cost 0) goes to the algorithm's reader, which a node past maxmemory still runs. */
  runLimit(algorithm: Algorithm, key: string, args: Buffer): Promise<Buffer> {
    if (!this.batcher) return this.runOne(algorithm, key, args);
    const slot = hashSlotOf(key);
    return this.batcher.run(slot, { algorithm, key, args, slot });
  }

  private runOne(algorithm: Algorithm, key: string, args: Buffer, slot?: number): Promise<Buffer> {
    const writer = LIMIT_FUNCTIONS[algorithm];
    if (!writer) throw new Error(`no limit function for ${algorithm}`);
    const name = peeks(args) ? readerOf(writer) : writer;
    const run = (declared: readonly string[]) =>
      this.calls.call(
        `limit on ${key}`,
        [key],
        () => fcallBuffer(this.cluster, limitLibrary, name, declared, [args]),
        this.callOptions,
      );
    return this.epoch ? this.epoch.run(key, (epochKey) => run([key, epochKey]), slot ?? hashSlotOf(key)) : run([key]);
  }

  /**
   * Checks of one slot in one call of lua/limit-batch.lua, each answered as lua/limit.lua would have answered
   * it alone (its 40 bytes of the packed reply), a check Redis refused with its own StoreReplyError. The
   * call's own failure (not run, no answer, STORELOST, an error reply) rejects, and is every check's.
   */
  private runBatch(calls: readonly LimitCall[]): Promise<Settled<Buffer>[]> {
    const keys = calls.map((call) => call.key);
    const args: (string | Buffer)[] = [Buffer.concat(calls.map((call) => call.args))];
    for (const call of calls) args.push(call.algorithm);
    const name = calls.every((call) => peeks(call.args)) ? readerOf("limit_batch") : "limit_batch";
    const first = keys[0] as string;
    const run = (declared: readonly string[]) =>
      this.calls.call(
        `limit batch of ${calls.length} on ${first}`,
        keys,
        // an array reply: the packed results, then the index and message of each check Redis refused
        () => fcallBuffer(this.cluster, limitLibrary, name, declared, args) as unknown as Promise<(Buffer | number)[]>,
        this.callOptions,
      );
    const slot = (calls[0] as LimitCall).slot;
    const replied = this.epoch ? this.epoch.run(first, (epochKey) => run([...keys, epochKey]), slot) : run(keys);
    return replied.then((reply) => {
      const packed = reply[0] as Buffer;
      if (!Buffer.isBuffer(packed) || packed.length !== LIMIT_REPLY_BYTES * calls.length)
        throw new Error(
          `limit batch of ${calls.length} replied ${Buffer.isBuffer(packed) ? packed.length : typeof packed} bytes`,
        );
      const settled: Settled<Buffer>[] = calls.map((_, i) => ({
        ok: true,
        value: packed.subarray(LIMIT_REPLY_BYTES * i, LIMIT_REPLY_BYTES * (i + 1)),
      }));
      for (let at = 1; at + 1 < reply.length; at += 2) {
        const i = Number(reply[at]) - 1;
        const message = String(reply[at + 1]);
        settled[i] = { ok: false, error: new StoreReplyError(`limit on ${calls[i]?.key}`, message) };
      }
      return settled;
    });
  }

  /** Every cost 0 (limitsArgs): the reader. */
  runLimits(keys: readonly string[], args: readonly (string | Buffer)[]): Promise<number[]> {
    const name = peeksAll(args) ? readerOf("limits") : "limits";
    const run = (declared: readonly string[]) =>
      this.calls.call(
        `limits on ${keys[0]}`,
        keys,
        () => fcall<number[], keyof typeof limitLibrary.functions>(this.cluster, limitLibrary, name, declared, args),
        this.callOptions,
      );
    const first = keys[0] as string;
    return this.epoch ? this.epoch.run(first, (epochKey) => run([...keys, epochKey])) : run(keys);
  }
}

/** One POST /v1/limit check as the store receives it: lua/limit.lua's key and packed arguments. */
interface LimitCall {
  algorithm: Algorithm;
  key: string;
  args: Buffer;
  /** The hash slot of `key` (the batcher's, and its epoch key's). */
  slot: number;
}

/** lua/limit.lua's reply: five little-endian doubles. */
const LIMIT_REPLY_BYTES = 40;
