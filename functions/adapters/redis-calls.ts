// How every Tollgate command reaches Redis: only over a ready connection, within a deadline, retried with
// jittered backoff while that is safe, behind a circuit breaker (one per cluster client) so that during an
// outage calls fail at once instead of each waiting out its deadline, and recover by themselves.

import type { Socket } from "node:net";
import {
  BrokenCircuitError,
  CircuitState,
  ConsecutiveBreaker,
  circuitBreaker,
  decorrelatedJitterGenerator,
  ExponentialBackoff,
  handleWhen,
  type IBackoff,
  noJitterGenerator,
} from "cockatiel";
import type { Cluster } from "ioredis";
import { isAuthFailure } from "../../sdk/src/protocol/index.ts";
import { StoreReplyError, StoreUnavailableError } from "../core/shared/errors.ts";
import { classifyRedisError } from "./redis-errors.ts";
import type { PasswordRenewal } from "./redis-reauth.ts";

export interface RedisCircuitOptions {
  /** Calls that end without an answer, in a row, that open the circuit (default 5). */
  threshold?: number;
  /** How long the circuit stays open before one call tries Redis again (default 1 s, doubling to 30 s while it fails). */
  halfOpenAfterMs?: number;
  /** The deadline of that trial call, so a still-dead Redis does not hold it long (default 1 s). */
  probeDeadlineMs?: number;
  /** Told when the circuit opens, half-opens and closes (for logs and metrics). */
  onStateChange?: (state: "open" | "half-open" | "closed") => void;
}

export interface CallOptions {
  /** The whole call, retries included, ends by then (ms from its start). */
  deadlineMs: number;
  /**
   * Which failures are sent again: "no-answer" (every one; only for idempotent calls, such as campaign
   * sends) or "not-run" (only those proving the command did not run: never sent, MOVED, CLUSTERDOWN, ...).
   */
  retryOn: "no-answer" | "not-run";
  /** Told of every failure that is retried. */
  onRetry?: (error: StoreUnavailableError) => void;
}

const STATE_NAMES = { [CircuitState.Open]: "open", [CircuitState.HalfOpen]: "half-open" } as const;

export class RedisCalls {
  private readonly breaker;
  private readonly probeDeadlineMs: number;
  /** Jittered, so the calls of many containers retrying after one failover do not arrive in waves. */
  private readonly backoff = new ExponentialBackoff({
    generator: decorrelatedJitterGenerator,
    initialDelay: 50,
    maxDelay: 500,
  });
  private readiness?: Promise<boolean>;
  /** Whether the primaries' sockets are held until the event loop's check phase (coalesceWrites). */
  private corked = false;
  /** Commands sent and not yet answered or given up on. */
  private inFlight = 0;

  constructor(
    private readonly cluster: Cluster,
    options: RedisCircuitOptions = {},
    /** When set, a call refused for its password (an AUTH rotation) is sent again on the secret's new one. */
    private readonly renewal?: PasswordRenewal,
  ) {
    this.probeDeadlineMs = options.probeDeadlineMs ?? 1_000;
    // Only "did not answer" counts: a Redis that answers with an error is up, and its errors are defects.
    this.breaker = circuitBreaker(
      handleWhen((error) => error instanceof StoreUnavailableError),
      {
        halfOpenAfter: new ExponentialBackoff({
          generator: noJitterGenerator,
          initialDelay: options.halfOpenAfterMs ?? 1_000,
          maxDelay: 30_000,
        }),
        breaker: new ConsecutiveBreaker(options.threshold ?? 5),
      },
    );
    const { onStateChange } = options;
    if (onStateChange) {
      this.breaker.onStateChange((state) => {
        onStateChange(state === CircuitState.Open || state === CircuitState.HalfOpen ? STATE_NAMES[state] : "closed");
      });
    }
  }

  /** "closed" while calls go through; "open" while they fail at once; "half-open" while one tries Redis. */
  get circuit(): "open" | "half-open" | "closed" {
    const state = this.breaker.state;
    return state === CircuitState.Open || state === CircuitState.HalfOpen ? STATE_NAMES[state] : "closed";
  }

  /**
   * Runs `send` (one ioredis command about `what`) and returns its reply, or rejects with
   * StoreUnavailableError (no answer, circuit open), StoreReplyError (Redis answered with an error) or the
   * error of a bug in this process.
   */
  call<T>(what: string, keys: readonly string[], send: () => Promise<T>, options: CallOptions): Promise<T> {
    // ioredis refuses keys of several slots in a pipeline itself, with an error that says nothing of
    // whether Redis was reached: refuse it here, as the defect it is (never an outage)
    if (keys.length > 1) {
      const tag = hashTagOf(keys[0] as string);
      const other = keys.find((key) => hashTagOf(key) !== tag);
      if (other !== undefined) return Promise.reject(new CrossSlotError(what, [keys[0] as string, other]));
    }
    // a call made while the circuit is not closed may be the trial one: it gets the short deadline
    const deadlineMs =
      this.breaker.state === CircuitState.Closed
        ? options.deadlineMs
        : Math.min(options.deadlineMs, this.probeDeadlineMs);
    // not an async function: this wraps every call, and each async layer costs promises and ticks
    return this.breaker
      .execute(() => this.attempts(what, send, options, deadlineMs))
      .catch((error: unknown) => {
        if (error instanceof BrokenCircuitError) {
          throw new StoreUnavailableError(
            `${what}: not sent: the Redis circuit is open after calls that got no answer`,
            {
              cause: error,
              mayHaveRun: false,
            },
          );
        }
        throw error;
      });
  }

  private attempts<T>(what: string, send: () => Promise<T>, options: CallOptions, deadlineMs: number): Promise<T> {
    // performance.now(), not Date.now(): the deadline must not move with the wall clock
    const deadline = performance.now() + deadlineMs;
    // the usual case, a ready client: its first attempt without an async function's promise and ticks, and
    // without a promise to wait on for readiness
    const used = this.renewal?.current;
    if (this.cluster.status !== "ready") return this.retried(what, send, options, deadline, undefined, used);
    return this.attempt(send, deadline).catch((error: unknown) =>
      this.retried(what, send, options, deadline, classifyRedisError(error, what), used),
    );
  }

  /** One attempt on a ready connection; `inFlight` counts it until it settles (reply, error or deadline). */
  private attempt<T>(send: () => Promise<T>, deadline: number): Promise<T> {
    if (this.inFlight > 0) this.coalesceWrites();
    this.inFlight++;
    let sent: Promise<T>;
    try {
      sent = send();
    } catch (error) {
      this.inFlight--;
      return Promise.reject(error);
    }
    return withDeadline(sent, deadline - performance.now(), () => {
      this.inFlight--;
    });
  }

  /** The attempts after `failure` (the first one's, or none yet: the client was not ready), until the deadline. */
  private async retried<T>(
    what: string,
    send: () => Promise<T>,
    options: CallOptions,
    deadline: number,
    failure: Error | undefined,
    /** The password the failed attempt went out with (when passwords are renewed). */
    used: string | undefined,
  ): Promise<T> {
    let backoff: IBackoff<unknown> | undefined;
    for (;;) {
      if (failure === undefined) {
        if (this.cluster.status === "ready" || (await this.whenReady(deadline - performance.now()))) {
          used = this.renewal?.current;
          try {
            return await this.attempt(send, deadline);
          } catch (error) {
            failure = classifyRedisError(error, what);
          }
        } else {
          // Not handed to ioredis while it has no ready connection: its offline queue would send the
          // command after this caller gave up (a charge landing after a 503).
          failure = new StoreUnavailableError(`${what}: not sent: no ready connection to the cluster`, {
            mayHaveRun: false,
          });
        }
      }
      // refused for its password, so it did not run: once the secret holds another, it goes again after the
      // backoff (ioredis closes the refused connection just after the reply: a command sent at once meets it)
      if (
        this.renewal &&
        failure instanceof StoreReplyError &&
        isAuthFailure(failure.reply) &&
        (await this.renewal.renewed(used))
      ) {
        failure = new StoreUnavailableError(`${what}: not run: ${failure.reply}`, {
          cause: failure,
          mayHaveRun: false,
        });
      }
      const retryable =
        failure instanceof StoreUnavailableError && (options.retryOn === "no-answer" || !failure.mayHaveRun);
      backoff = backoff ? backoff.next(undefined) : this.backoff.next();
      if (!retryable || performance.now() + backoff.duration >= deadline) throw failure;
      options.onRetry?.(failure as StoreUnavailableError);
      // ioredis does not re-send a pipelined command after MOVED or a dropped connection: the next
      // attempt goes out on a fresh slot map
      this.cluster.refreshSlotsCache();
      await sleep(backoff.duration);
      failure = undefined;
    }
  }

  /**
   * Holds the primaries' sockets until the I/O callbacks of this turn of the event loop have run (cork,
   * then uncork in setImmediate, as ioredis' autopipelining waits), so the commands that the replies read
   * from every socket in this turn set off leave in one write per node rather than one system call each,
   * which is what most of a call's CPU went to (docs/decisions/0020-rate-limit-fast-path.md). Uncorking on
   * the next tick instead shared a write only among the replies of one socket read: under load, twice the
   * writes per call. Only while other calls are in flight: a lone call (a check API environment takes one
   * invocation at a time) writes at once, with nothing to share its write with.
   */
  private coalesceWrites(): void {
    if (this.corked) return;
    this.corked = true;
    const streams: Socket[] = [];
    for (const node of this.cluster.nodes("master")) {
      const { stream } = node;
      if (stream && node.status === "ready") {
        stream.cork();
        streams.push(stream);
      }
    }
    setImmediate(() => {
      this.corked = false;
      for (const stream of streams) stream.uncork();
    });
  }

  /** Whether the cluster has a ready connection within `ms`, starting it again if it had given up. */
  private whenReady(ms: number): Promise<boolean> {
    const { cluster } = this;
    if (cluster.status === "ready") return Promise.resolve(true);
    // After its bounded reconnect attempts ioredis ends the client for good; a warm container outlives a
    // Redis outage, so a call after one starts the client again.
    // ioredis keeps its attempt count past "end": without a reset, a restarted client gets one attempt and
    // ends again at its first failure (the fresh cluster still starting), so the route stayed down for good
    if (cluster.status === "end" || cluster.status === "wait") {
      (cluster as unknown as { retryAttempts: number }).retryAttempts = 0;
      cluster.connect().catch(() => {});
    }
    if (ms <= 0) return Promise.resolve(false);
    // one listener pair for every waiting call, however many are in flight
    this.readiness ??= new Promise<boolean>((resolve) => {
      const settle = (ready: boolean) => () => {
        cluster.off("ready", onReady);
        cluster.off("end", onEnd);
        this.readiness = undefined;
        resolve(ready);
      };
      const onReady = settle(true);
      const onEnd = settle(false);
      cluster.once("ready", onReady);
      cluster.once("end", onEnd);
    });
    let timer: NodeJS.Timeout | undefined;
    return Promise.race([
      this.readiness,
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), ms);
      }),
    ]).finally(() => clearTimeout(timer));
  }
}

/** Keys of one call that do not share a hash tag (CROSSSLOT on a cluster): a bug in the key builders. */
export class CrossSlotError extends Error {
  constructor(what: string, keys: readonly [string, string]) {
    super(`${what}: keys of one call must share one hash tag: "${keys[0]}" and "${keys[1]}"`);
    this.name = "CrossSlotError";
  }
}

/** The part of a key Redis hashes to pick its slot: the first non-empty `{...}`, else the whole key. */
export function hashTagOf(key: string): string {
  const open = key.indexOf("{");
  if (open < 0) return key;
  const close = key.indexOf("}", open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : key;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Rejects when `promise` has not settled `ms` after the call; `settled` is called once either way. A busy event loop runs due timers before it
 * reads its sockets, so a reply that arrived in time would lose to its own deadline (and the request,
 * charged, would be told "no reply"): the deadline reads pending I/O once (setImmediate runs after the
 * poll phase) before it gives up.
 */
function withDeadline<T>(promise: Promise<T>, ms: number, settled: () => void): Promise<T> {
  // one promise and one timer, no Promise.race/finally: this wraps every call, and the race's extra
  // promises cost more than a rate-limit check's own work
  return new Promise<T>((resolve, reject) => {
    let immediate: NodeJS.Immediate | undefined;
    let done = false;
    const timer = setTimeout(
      () => {
        immediate = setImmediate(() => {
          done = true;
          settled();
          reject(new Error(`no reply within ${Math.round(Math.max(ms, 0))} ms`));
        });
      },
      Math.max(ms, 0),
    );
    const answered = () => {
      clearTimeout(timer);
      clearImmediate(immediate);
      if (done) return false;
      done = true;
      settled();
      return true;
    };
    promise.then(
      (value) => {
        if (answered()) resolve(value);
      },
      (error: unknown) => {
        if (answered()) reject(error);
      },
    );
  });
}
