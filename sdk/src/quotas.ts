// The SDK's entry point: local decisions (engine.ts) kept fresh by a sync loop that, every interval
// (default 50 ms, jittered), sends each slot group's usage and receives its allowances in one round trip.
// Servers run the loop on unref'd timers; on Lambda there are no timers: the middy middleware syncs at the
// invocation boundary when the last sync is older than the interval, and nothing is left running.
import { randomBytes } from "node:crypto";
import { type Clock, type Scheduler, systemClock, unrefScheduler } from "./clock.ts";
import type { Decision } from "./decision.ts";
import { type EngineOptions, QuotaEngine } from "./engine.ts";
import { QuotaRuleGoneError, QuotasConfigError, SyncRejectedError } from "./errors.ts";
import { NAME_PATTERN, type QuotaRule, type SyncReply, type SyncRequest, WireError } from "./protocol/index.ts";
import { type QuotasMetrics, roundMetrics } from "./round-metrics.ts";
import type { GroupState, QuotaHandle } from "./state.ts";

export type { QuotasMetrics } from "./round-metrics.ts";

/** How a sync reaches the store: direct to Redis (transports/redis.ts) or over HTTP (transports/http.ts). */
export interface QuotaTransport {
  /**
   * One sync call. Rejects with StoreUnreachableError when the store did not answer (the SDK degrades),
   * SyncRejectedError when it answered with an error.
   */
  sync(request: SyncRequest, now: number): Promise<SyncReply>;
}

export interface QuotasOptions extends Omit<EngineOptions, "instanceId" | "syncIntervalMs"> {
  transport: QuotaTransport;
  /** Default 50 ms. */
  syncIntervalMs?: number;
  /** Each interval is drawn from ±this share of it, so instances do not sync in step (default 0.2). */
  jitter?: number;
  /** Default: random, `<hostname-free 12 hex>`; must match NAME_PATTERN and never be reused. */
  instanceId?: string;
  clock?: Clock;
  scheduler?: Scheduler;
  /** Called after every sync round. */
  onMetrics?: (metrics: QuotasMetrics) => void;
  /** Called with every failed sync (the SDK carries on degraded); default: nothing. */
  onError?: (error: Error) => void;
  /**
   * How long `decide` (the middleware) waits for the syncs of a key it has no allowance for (default 500 ms,
   * the direct transport's timeout); past it the request is decided by what the key holds then.
   */
  waitMs?: number;
  /**
   * strict: between ticks the loop notes every this many ms what each key has spent (one unref'd timer, no
   * call), so the store counts spent tokens from about when they were spent rather than from their report
   * (default 10; 0: off, every spend dated at the tick that reports it). Only with `start()`.
   */
  observeIntervalMs?: number;
}

/** Node's longest timer: a longer delay (Infinity included) fires after 1 ms instead. */
const MAX_TIMER_MS = 2_147_483_647;
const WAIT_SYNCS = 6; // the most syncs one `decide` waits for, within its `waitMs`

export class Quotas {
  readonly engine: QuotaEngine;
  private readonly transport: QuotaTransport;
  private readonly clock: Clock;
  private readonly scheduler: Scheduler;
  readonly syncIntervalMs: number;
  private readonly jitter: number;
  private readonly onMetrics: ((metrics: QuotasMetrics) => void) | undefined;
  private readonly onError: (error: Error) => void;
  private timer: { cancel(): void } | undefined;
  private observeTimer: { cancel(): void } | undefined;
  private readonly observeIntervalMs: number;
  private running = false;
  /** Rounds whose calls have not all settled (a slow call never holds the next tick back). */
  private readonly rounds = new Set<Promise<void>>();
  /** Local ms of the start of the last sync round (-1: never). */
  lastSyncAt = -1;
  /** Each slot group's call on the wire, settled (never rejecting): `decide` waits for it. */
  private readonly calls = new Map<GroupState, Promise<void>>();
  private readonly waitMs: number;

  constructor(options: QuotasOptions) {
    const syncIntervalMs = options.syncIntervalMs ?? 50;
    if (!(syncIntervalMs >= 1 && syncIntervalMs <= MAX_TIMER_MS)) {
      throw new QuotasConfigError("syncIntervalMs", `expected a number of ms from 1 to ${MAX_TIMER_MS}`);
    }
    const jitter = options.jitter ?? 0.2;
    if (!(jitter >= 0 && jitter < 1)) throw new QuotasConfigError("jitter", "expected a share in [0, 1)");
    const instanceId = options.instanceId ?? `i-${randomBytes(8).toString("hex")}`;
    if (!NAME_PATTERN.test(instanceId)) throw new QuotasConfigError("instanceId", `expected ${NAME_PATTERN}`);
    if (!options.transport)
      throw new QuotasConfigError("transport", "required: redisTransport(...) or httpTransport(...)");
    // a tick comes at most an interval and its jitter after the last (later only when the event loop is busy)
    this.engine = new QuotaEngine({ ...options, instanceId, syncIntervalMs, tickMs: syncIntervalMs * (1 + jitter) });
    this.transport = options.transport;
    this.clock = options.clock ?? systemClock;
    this.scheduler = options.scheduler ?? unrefScheduler;
    this.syncIntervalMs = syncIntervalMs;
    this.jitter = jitter;
    this.onMetrics = options.onMetrics;
    this.onError = options.onError ?? (() => {});
    const observeIntervalMs = options.observeIntervalMs ?? 10;
    if (!(observeIntervalMs >= 0 && observeIntervalMs <= MAX_TIMER_MS)) {
      throw new QuotasConfigError("observeIntervalMs", `expected a number of ms from 0 (off) to ${MAX_TIMER_MS}`);
    }
    this.observeIntervalMs = observeIntervalMs;
    const waitMs = options.waitMs ?? 500;
    if (!(waitMs >= 0 && waitMs <= MAX_TIMER_MS)) {
      throw new QuotasConfigError("waitMs", `expected a number of ms from 0 to ${MAX_TIMER_MS}`);
    }
    this.waitMs = waitMs;
    for (const [name, rule] of Object.entries(options.rules ?? {})) {
      const problem = this.leaseProblem(rule);
      if (problem) throw new QuotasConfigError(`rules.${name}.leaseMs`, problem);
    }
  }

  get instanceId(): string {
    return this.engine.instanceId;
  }

  /** Decides a request from local allowances: no I/O, no clock read, no allocation (see Decision). */
  check(rule: string, key: string, cost = 1): Readonly<Decision> {
    return this.engine.check(rule, key, cost);
  }

  /** A hot key's handle, resolved once; `checkHandle` skips the lookups. */
  resolve(rule: string, key: string): QuotaHandle {
    return this.engine.resolve(rule, key);
  }

  checkHandle(handle: QuotaHandle, cost = 1): Readonly<Decision> {
    return this.engine.checkHandle(handle, cost);
  }

  /**
   * `check` for callers that can wait one round trip now and then (the middleware): decided at once, with
   * no I/O, when the key's allowance admits it or the denial is the store's (its window is full, it has no
   * such rule, or it is unreachable and the fallback decides); otherwise (a key that never had an allowance
   * here, or whose allowance is spent while the store may have more) syncs of its slot group carry the request's
   * demand first, at most `waitMs` (default 500 ms), and the answers decide. So under its limit a key is
   * not denied for want of a local allowance. Returns the Decision itself when decided at once (nothing
   * allocated), a promise of a copy when it waited.
   */
  decide(rule: string, key: string, cost = 1, waitMs = this.waitMs): Readonly<Decision> | Promise<Decision> {
    const engine = this.engine;
    const handle = engine.handle(rule, key);
    // a cost checkHandle refuses is refused there (it throws), never waited for
    const short = handle.assignedAt < 0 || !engine.admits(handle, cost);
    if (short && Number.isSafeInteger(cost) && cost >= 0 && engine.mayGrant(handle, this.clock.now()))
      return this.decideAfterSync(handle, cost, waitMs);
    return engine.checkHandle(handle, cost);
  }

  /**
   * `decide`, always as a promise of a copy of the Decision, waiting as long as the transport does (the
   * Lambda middleware: an environment's first call may open the connection, which takes longer than
   * `waitMs`, and the invocation waits anyway).
   */
  async checkFresh(rule: string, key: string, cost = 1): Promise<Readonly<Decision>> {
    const decision = this.decide(rule, key, cost, Number.POSITIVE_INFINITY);
    return decision instanceof Promise ? decision : { ...decision };
  }

  /**
   * Resolves true once every rule named (and every rule this instance already has keys of) has been
   * answered by the store: its definition, or that it has none. A rule without keys yet asks with a request
   * of no keys. False when `timeoutMs` (default 2,000) passed first or the store did not answer: the SDK
   * then decides by its fallbacks and keeps trying. Never rejects.
   */
  async ready(options: { rules?: readonly string[]; timeoutMs?: number } = {}): Promise<boolean> {
    for (const name of options.rules ?? []) this.engine.await(name);
    const answered = async () => {
      await Promise.all(this.rounds);
      await this.sync();
      for (const rule of this.engine.allRules()) {
        if (!rule.known && !(rule.missingUntil > this.clock.now())) return false;
      }
      return true;
    };
    const timeoutMs = options.timeoutMs ?? 2_000;
    let timer: { cancel(): void } | undefined;
    const timeout = new Promise<boolean>((resolve) => {
      timer = this.scheduler.schedule(timeoutMs, () => resolve(false));
    });
    try {
      return await Promise.race([answered().catch(() => false), timeout]);
    } finally {
      timer?.cancel();
    }
  }

  /** The key's group synced with this request's demand in it, then the request decided (a copy). */
  private async decideAfterSync(handle: QuotaHandle, cost: number, waitMs: number): Promise<Decision> {
    let timer: { cancel(): void } | undefined;
    let late = false;
    // no timer for an unbounded wait (Infinity would fire after 1 ms): the transport's timeout bounds it
    const waited = new Promise<void>((resolve) => {
      if (waitMs > MAX_TIMER_MS) return;
      timer = this.scheduler.schedule(waitMs, () => {
        late = true;
        resolve();
      });
    });
    try {
      // again while the wait lasts: a reply may only bring the rule, or a short grant (an instance's share of
      // what is left) that waiters asking together spend before the last of them; one call shared by them
      for (let attempt = 0; attempt < WAIT_SYNCS && !late; attempt++) {
        handle.waiting += cost;
        await Promise.race([this.syncGroupNow(handle.group), waited]);
        // done when admitted, when the store will not grant, refused the sync, or has less left than the cost
        if (this.engine.admits(handle, cost) || !this.engine.mayGrant(handle, this.clock.now())) break;
        if (handle.group.refused || handle.left + handle.headroom < cost) break;
      }
    } finally {
      timer?.cancel();
    }
    return { ...this.engine.checkHandle(handle, cost) };
  }

  /**
   * One call of `group` that starts after now: the one in flight first if there is one (it was taken
   * before this request's demand), then one more unless another waiter started it already.
   */
  private async syncGroupNow(group: GroupState): Promise<void> {
    const inFlight = this.calls.get(group);
    if (inFlight) await inFlight;
    const next = this.calls.get(group);
    if (next && next !== inFlight) {
      await next;
      return;
    }
    await this.track(this.runRound([group]));
  }

  /** Starts the timer loop (servers). Its timers are unref'd: they never keep the process alive. */
  start(): this {
    if (this.running) return this;
    this.running = true;
    this.scheduleNext();
    this.scheduleObserve();
    return this;
  }

  /**
   * Notes what each strict key holding tokens has spent so far (the sub-tick timer calls it; tests call it
   * by hand): the next request dates those spends no later than now.
   */
  observe(): void {
    const now = this.clock.now();
    // a strict key ran dry while the store still has tokens to grant: its group's request now rather than at
    // the tick (that group's alone: the others, and an unanswered request of any, wait for the tick)
    const early = this.engine.observe(now, this.monotonic());
    if (early) this.track(this.runRound(early)).catch((error: unknown) => this.onError(error as Error));
  }

  /**
   * Stops the loop and reports the usage still unreported: one last round, and one more when the first only
   * resent a request left unanswered (what was admitted since goes in a request of its own).
   */
  async stop(): Promise<void> {
    this.running = false;
    this.timer?.cancel();
    this.timer = undefined;
    this.observeTimer?.cancel();
    this.observeTimer = undefined;
    await Promise.all(this.rounds);
    await this.sync();
    if (this.engine.hasUnreported()) await this.sync();
  }

  /** On Lambda, at the invocation boundary: one round if the last is older than the interval, else nothing. */
  async syncIfStale(): Promise<void> {
    if (this.lastSyncAt >= 0 && this.clock.now() - this.lastSyncAt < this.syncIntervalMs) return;
    await this.sync();
  }

  /**
   * One sync round now: time advances in the engine (strict leases end, degraded mode begins), then every
   * slot group with something to report (or an unacknowledged request) and no call in flight makes one
   * call, all in parallel. Resolves when this round's calls have settled. A round never waits for an
   * earlier one: a slow call holds its own group only, and time keeps advancing for every key.
   */
  sync(): Promise<void> {
    return this.track(this.runRound());
  }

  /** `round`, in the rounds `stop()` waits for until it settles. */
  private track(running: Promise<void>): Promise<void> {
    const round: Promise<void> = running.finally(() => {
      this.rounds.delete(round);
    });
    this.rounds.add(round);
    return round;
  }

  /**
   * A round: every group with something to say, or (an early round) only the groups `only` names, which
   * neither counts as the tick (the next still comes on time) nor reports metrics.
   */
  private async runRound(only?: readonly GroupState[]): Promise<void> {
    const now = this.clock.now();
    const mono = this.monotonic();
    if (!only) this.lastSyncAt = now;
    const engine = this.engine;
    engine.advance(now, mono);
    const latencies: number[] = [];
    let errors = 0;
    const calls: Promise<void>[] = [];
    for (const rule of engine.allRules()) {
      for (const group of rule.groups) {
        if (group.busy || (only && !only.includes(group))) continue;
        const request = engine.takeRequest(group, now, mono);
        if (!request) continue;
        calls.push(
          this.syncGroup(group, request, now).then(
            (ms) => {
              latencies.push(ms);
            },
            () => {
              errors++;
            },
          ),
        );
      }
    }
    await Promise.all(calls);
    if (!only && this.onMetrics) this.onMetrics(roundMetrics(engine, now, latencies, errors));
  }

  private syncGroup(group: GroupState, request: SyncRequest, sentAt: number): Promise<number> {
    const call = this.callGroup(group, request, sentAt);
    const settled = call.then(
      () => undefined,
      () => undefined,
    );
    this.calls.set(group, settled);
    settled.then(() => {
      if (this.calls.get(group) === settled) this.calls.delete(group);
    });
    return call;
  }

  private async callGroup(group: GroupState, request: SyncRequest, sentAt: number): Promise<number> {
    group.busy = true;
    try {
      const reply = await this.transport.sync(request, sentAt);
      const now = this.clock.now();
      const wasGone = group.rule.gone;
      this.engine.applyReply(group, reply, sentAt, now, this.monotonic());
      if (group.rule.gone && !wasGone) this.onError(new QuotaRuleGoneError(request.rule));
      const problem = reply.rule && this.leaseProblem(reply.rule);
      if (problem) this.onError(new QuotasConfigError(`rule ${request.rule}: leaseMs`, problem));
      return now - sentAt;
    } catch (error) {
      // an answer that is an error, or that does not decode, is not an outage: the usage goes out again
      if (error instanceof SyncRejectedError && error.status === 403) this.engine.forbidden(group, this.clock.now());
      else if (error instanceof SyncRejectedError || error instanceof WireError) this.engine.rejected(group);
      // the request stays pending: it goes out again, same sequence, until the store answers
      else this.engine.unreachable(group, this.clock.now());
      this.onError(error as Error);
      throw error;
    } finally {
      group.busy = false;
    }
  }

  /**
   * A strict rule whose tokens end before this loop can spend them: each lease counts as ended a tick
   * early (`tickMs`), so one no longer than two ticks leaves little or nothing to spend.
   */
  private leaseProblem(rule: QuotaRule): string | undefined {
    const tickMs = this.engine.tickMs;
    if (rule.mode !== "strict" || rule.leaseMs > 2 * tickMs) return undefined;
    return `a strict lease of ${rule.leaseMs} ms leaves this instance (sync interval ${this.syncIntervalMs} ms, ticks up to ${tickMs} ms apart) almost nothing to spend: its tokens count as ended a tick early; use a lease above ${2 * tickMs} ms or a shorter syncIntervalMs`;
  }

  /** The clock spend stamps are measured on (read after `now` wherever both are read). */
  private monotonic(): number {
    return this.clock.monotonic ? this.clock.monotonic() : this.clock.now();
  }

  private scheduleObserve(): void {
    if (!this.running || this.observeIntervalMs <= 0) return;
    this.observeTimer = this.scheduler.schedule(this.observeIntervalMs, () => {
      this.scheduleObserve();
      this.observe();
    });
  }

  /** The next tick, whatever the rounds in flight: leases end on time even while a call is slow. */
  private scheduleNext(): void {
    if (!this.running) return;
    const spread = this.syncIntervalMs * this.jitter;
    const delay = this.syncIntervalMs - spread + Math.random() * 2 * spread;
    this.timer = this.scheduler.schedule(delay, () => {
      this.scheduleNext();
      this.sync().catch((error: unknown) => this.onError(error as Error));
    });
  }
}

/** Builds the SDK: `createQuotas({ transport: redisTransport({ cluster }) }).start()`. */
export function createQuotas(options: QuotasOptions): Quotas {
  return new Quotas(options);
}
