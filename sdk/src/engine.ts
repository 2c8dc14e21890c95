// The local decision engine. `check` decides from this instance's allowances with no I/O, no clock read
// and no allocation. The sync loop (quotas.ts) calls the rest, with the time: `advance` (leases end,
// degraded mode begins), `takeRequest` (usage out, per slot group: sync-request.ts) and `applyReply`
// (allowances in); strict tokens are asked for and charged in strict-grants.ts, degraded mode in safe-share.ts.
import type { Decision } from "./decision.ts";
import { QuotasArgumentError } from "./errors.ts";
import { type QuotaRule, quotaKeyProblem, type SyncReply, type SyncRequest, WireError } from "./protocol/index.ts";
import { advanceDegraded } from "./safe-share.ts";
import { dropIdle, type GroupState, QuotaHandle, RuleState, Source, tightestLimit } from "./state.ts";
import { chargeGrants, headroomOf, observeSpending } from "./strict-grants.ts";
import { restore, takeRequest, unreported } from "./sync-request.ts";

export interface EngineOptions {
  /** Random per process, never reused (the store's idempotency is per instance and sequence). */
  instanceId: string;
  /** Rules known before the first sync; each sync reply brings the store's current definition. */
  rules?: Readonly<Record<string, QuotaRule>>;
  /** What `check` answers for a rule no definition has arrived for yet (default `deny`). */
  unknownRule?: "allow" | "deny";
  /** With the store unreachable, the last allowance is kept this long before the fallback (default 2,000 ms). */
  keepAllowanceMs?: number;
  /** Instances assumed until the store reports a count (default 0: no share before the first sync). */
  instancesHint?: number;
  /** The sync interval: degraded-mode slots are never shorter. */
  syncIntervalMs: number;
  /**
   * The longest gap between two ticks of the loop (the interval with its jitter, default the interval): a
   * strict lease ending within it counts as ended, since `check` spends tokens until the next tick.
   */
  tickMs?: number;
  /** Idle, unpinned keys beyond this many are dropped at the next tick (default 100,000). */
  maxKeys?: number;
  /** strict: a key that ran dry asks again no sooner than this after its group's last request (default F/2). */
  earlyGapMs?: number;
}

/**
 * How long a rule the store does not know is left alone before asking again: a rule an operator adds
 * reaches a client within this and a tick (the target is 1 s).
 */
const NORULE_RETRY_MS = 500;

export class QuotaEngine {
  private readonly rules = new Map<string, RuleState>();
  private readonly decision: Decision = {
    allowed: false,
    limit: 0,
    remaining: 0,
    resetSeconds: 0,
    retryAfterSeconds: 0,
    policy: "",
  };
  readonly instanceId: string;
  private readonly unknownRule: "allow" | "deny";
  readonly keepAllowanceMs: number;
  private readonly instancesHint: number;
  readonly syncIntervalMs: number;
  readonly tickMs: number;
  private readonly maxKeys: number;
  /** strict: the shortest time between two requests of a group when the second is early (a key ran dry). */
  readonly earlyGapMs: number;
  private keyCount = 0;
  /** Strict keys holding tokens or with demand at the last tick: the only ones `observe` looks at. */
  private spending: QuotaHandle[] = [];
  /** The time `advance` last saw: a later call with an earlier time means the wall clock stepped back. */
  private lastAdvanceAt = Number.NEGATIVE_INFINITY;
  private readonly degradedOptions: { tickMs: number; keepAllowanceMs: number; unknownRule: "allow" | "deny" };
  /** Admissions and denials since the metrics hook last read them. */
  admittedCount = 0;
  deniedCount = 0;

  constructor(options: EngineOptions) {
    this.instanceId = options.instanceId;
    this.unknownRule = options.unknownRule ?? "deny";
    this.keepAllowanceMs = options.keepAllowanceMs ?? 2_000;
    this.instancesHint = options.instancesHint ?? 0;
    this.syncIntervalMs = options.syncIntervalMs;
    this.tickMs = Math.max(options.tickMs ?? options.syncIntervalMs, options.syncIntervalMs);
    this.maxKeys = options.maxKeys ?? 100_000;
    this.earlyGapMs = options.earlyGapMs ?? this.syncIntervalMs / 2;
    this.degradedOptions = {
      tickMs: this.syncIntervalMs,
      keepAllowanceMs: this.keepAllowanceMs,
      unknownRule: this.unknownRule,
    };
    for (const [name, rule] of Object.entries(options.rules ?? {})) this.ruleState(name).define(rule, "");
  }

  get size(): number {
    return this.keyCount;
  }

  rule(name: string): RuleState | undefined {
    return this.rules.get(name);
  }

  allRules(): IterableIterator<RuleState> {
    return this.rules.values();
  }

  // ---- the hot path ----

  /**
   * Decides one request of `cost` (default 1) for `key` under every limit of `rule`, all-or-nothing. The
   * first sight of a key allocates its handle; after that, two map lookups and arithmetic.
   */
  check(rule: string, key: string, cost = 1): Readonly<Decision> {
    const handle = this.rules.get(rule)?.handles.get(key) ?? this.create(rule, key);
    return this.checkHandle(handle, cost);
  }

  /** The handle of a key, made on first sight (evicted when idle, unlike `resolve`'s). */
  handle(rule: string, key: string): QuotaHandle {
    return this.rules.get(rule)?.handles.get(key) ?? this.create(rule, key);
  }

  /** The handle of a hot key, resolved once: `checkHandle(handle)` skips both lookups. Never evicted. */
  resolve(rule: string, key: string): QuotaHandle {
    const handle = this.rules.get(rule)?.handles.get(key) ?? this.create(rule, key);
    handle.pinned = true;
    return handle;
  }

  checkHandle(handle: QuotaHandle, cost = 1): Readonly<Decision> {
    // what the store counts: whole units (NaN or a negative would compare its way past every allowance)
    if (!(cost >= 0 && Number.isSafeInteger(cost)))
      throw new QuotasArgumentError("cost", `expected a whole number ≥ 0 (at most 2^53 - 1), got ${cost}`);
    const d = this.decision;
    const rule = handle.rule;
    d.limit = rule.maxes[handle.tightest] ?? 0;
    d.resetSeconds = handle.resetSeconds;
    d.policy = rule.policy;
    if (handle.left < cost) {
      handle.denied += cost;
      this.deniedCount++;
      d.allowed = false;
      d.remaining = Math.max(handle.left, 0);
      // never 0 while denied: a new allowance comes with a sync at the earliest
      d.retryAfterSeconds = Math.max(handle.resetSeconds, 1);
      return d;
    }
    handle.left -= cost;
    handle.used += cost;
    handle.admittedTotal += cost;
    this.admittedCount++;
    d.allowed = true;
    d.remaining = handle.left;
    d.retryAfterSeconds = 0;
    return d;
  }

  /**
   * Whether a request of `cost` would be admitted now, without deciding it (nothing counted). `cost` is
   * checked as `checkHandle` checks it.
   */
  admits(handle: QuotaHandle, cost: number): boolean {
    return cost >= 0 && Number.isSafeInteger(cost) && handle.left >= cost;
  }

  /**
   * Whether a sync now could give the key more than it holds: not when the store said its window is full
   * (`denyUntil`), nor while the store is unreachable (the fallback decides) or says it has no such rule.
   */
  mayGrant(handle: QuotaHandle, now: number): boolean {
    const rule = handle.rule;
    return now >= rule.missingUntil && handle.group.unreachableSince < 0 && now >= handle.denyUntil;
  }

  /** A rule `ready()` waits for: known by name before any key of it is checked. */
  await(name: string): RuleState {
    const state = this.ruleState(name);
    state.awaited = true;
    return state;
  }

  private ruleState(name: string): RuleState {
    let state = this.rules.get(name);
    if (!state) {
      state = new RuleState(name, this.instancesHint);
      this.rules.set(name, state);
    }
    return state;
  }

  private create(rule: string, key: string): QuotaHandle {
    // refused at first sight, with the field named: the sync would refuse it for the whole slot group
    const problem = quotaKeyProblem(key);
    if (problem) throw new WireError("key", problem);
    const state = this.ruleState(rule);
    const handle = new QuotaHandle(state, key, state.groupFor(key));
    state.handles.set(key, handle);
    state.place(handle);
    this.keyCount++;
    this.fallBack(handle);
    return handle;
  }

  /** No valid allowance: the rule's fallback (or `unknownRule` before any definition). */
  private fallBack(handle: QuotaHandle): void {
    const rule = handle.rule;
    handle.source = Source.None;
    const fallback = rule.definition?.fallback ?? this.unknownRule;
    const behaviour = rule.gone && fallback !== "allow" ? "deny" : fallback;
    handle.left =
      behaviour === "allow" ? Number.POSITIVE_INFINITY : behaviour === "deny" ? 0 : rule.share(handle.group);
    handle.tightest = 0;
    handle.resetSeconds = Math.ceil((rule.definition?.limits[0]?.windowMs ?? 1_000) / 1_000);
  }

  /**
   * approximate: an allowance past its validity (the next reply is late) keeps at most the fallback of
   * what was left: the store still holds it reserved, so a stale allowance never becomes a fresh budget
   * (a late timer used to hand each instance another share of the limit).
   */
  private expire(handle: QuotaHandle): void {
    const left = handle.left;
    this.fallBack(handle);
    handle.left = Math.min(left, handle.left);
  }

  // ---- the sync side: called by the sync loop, never by `check` ----

  /**
   * The request for one slot group: the unacknowledged one again if there is one (same seq, same
   * entries), else a new one with every key that has something to say (sync-request.ts). Undefined: nothing
   * to send.
   */
  takeRequest(group: GroupState, now: number, mono = now): SyncRequest | undefined {
    return takeRequest(this, group, now, mono);
  }

  /**
   * Installs a reply. `sentAt` is when this attempt was sent (local clock): expiries convert to local time
   * from it, so they are never later than the store's.
   */
  applyReply(group: GroupState, reply: SyncReply, sentAt: number, now: number, mono = now): void {
    const pending = group.pending;
    group.pending = undefined;
    group.refused = false;
    const rule = group.rule;
    if (reply.rule) {
      // a group the new definition drops never sends again: its unanswered request's usage goes back to its
      // keys, which the new groups report (it may have been counted: as after an error reply)
      for (const dropped of rule.groups.slice(Math.max(1, reply.rule.slotGroups))) {
        if (dropped === group || !dropped.pending) continue;
        restore(dropped.pending, true);
        dropped.pending = undefined;
      }
      rule.define(reply.rule, reply.configVersion);
    }
    if (reply.instances > 0) group.instances = reply.instances;
    group.lastOkAt = now;
    group.unreachableSince = -1;
    if (!pending) return;
    if (reply.status === "norule") {
      // the rule was removed, or lost with the store's state (FLUSHALL, a node back empty): what `unknownRule`
      // says, not the rule's fallback (an approximate rule's share would go on admitting under a rule the
      // store no longer has, counted by nobody); a rule this instance had is reported gone (onError)
      if (rule.definition) rule.gone = true;
      rule.forget();
      rule.missingUntil = now + NORULE_RETRY_MS;
      for (const handle of rule.handles.values()) this.fallBack(handle);
      return;
    }
    rule.gone = false;
    if (reply.status === "stale") {
      // keys grouped by an older definition (nothing counted) or a sequence number older than the store
      // remembers (it cannot tell whether it applied it): the usage goes out again under a new one as after
      // an error reply (strict spends and refunds dropped: taken off their grant twice they could remove
      // other grants' tokens and over-admit; dropped, the grant counts until its lease ends)
      restore(pending, true);
      return;
    }
    const toLocal = (at: number) => sentAt + (at - reply.serverTime);
    // the wall clock stepped back while the call was out: its expiries, converted from before the step,
    // would end late by the step, so its tokens go back at once and its allowances lapse at the next tick
    const stepped = now < sentAt;
    reply.entries.forEach((assignment, i) => {
      const handle = pending.handles[i];
      if (!handle || handle.key !== assignment.key) return;
      handle.ring = undefined;
      handle.source = Source.Assigned;
      handle.assignedAt = now;
      handle.ackedTotal = handle.admittedTotal - unreported(handle);
      handle.denyUntil = assignment.denyUntil > reply.serverTime ? toLocal(assignment.denyUntil) : 0;
      handle.tightest = tightestLimit(rule.maxes, assignment.used);
      handle.headroom = headroomOf(rule.maxes, assignment.used);
      handle.resetSeconds = Math.max(0, Math.ceil((assignment.resetAt - reply.serverTime) / 1_000));
      if (assignment.mode === "approximate") {
        // the allowance counts from the moment the request was sent: what was admitted since is spent
        handle.left = handle.denyUntil > 0 ? 0 : assignment.allowance - unreported(handle);
        handle.validUntil = stepped ? now : toLocal(assignment.validUntil);
      } else {
        handle.shortGrant = assignment.tokens < (pending.request.entries[i]?.want ?? 0);
        if (assignment.tokens > 0) {
          handle.grants.push(reply.serverTime, toLocal(assignment.leaseExpiresAt), assignment.tokens);
          if (handle.grants.length === 3) this.spending.push(handle);
        }
        chargeGrants(handle, now, stepped, mono, this.tickMs);
      }
    });
  }

  /**
   * The sync endpoint refused this caller the rule (403: its tenant does not sync it, docs/tenants.md): as for
   * a rule the store does not hold, its keys decide by `unknownRule`, and the request is dropped (not counted).
   */
  forbidden(group: GroupState, now: number): void {
    group.pending = undefined;
    const rule = group.rule;
    if (rule.definition) rule.gone = true;
    rule.forget();
    rule.missingUntil = now + NORULE_RETRY_MS;
    for (const handle of rule.handles.values()) this.fallBack(handle);
  }

  /** The store answered with an error for this request: nothing is known to be counted, so it goes out again. */
  rejected(group: GroupState): void {
    const pending = group.pending;
    group.pending = undefined;
    group.refused = true;
    if (pending) restore(pending, true);
  }

  /** Something not yet acknowledged by the store: a request unanswered, or usage, demand, refunds or spends not sent. */
  hasUnreported(): boolean {
    for (const rule of this.rules.values()) {
      for (const group of rule.groups) {
        if (group.pending) return true;
        for (const h of group.handles) {
          if (h.used > 0 || h.denied > 0 || h.epochs.length > 0 || h.refunds.length > 0 || h.spent.length > 0)
            return true;
        }
      }
    }
    return false;
  }

  /** The store did not answer: allowances are kept (not replenished) until `keepAllowanceMs`, then the fallback. */
  unreachable(group: GroupState, now: number): void {
    if (group.unreachableSince < 0) group.unreachableSince = now;
    for (const handle of group.handles) if (handle.source === Source.Assigned) handle.source = Source.Kept;
  }

  /**
   * The passage of time, with one clock read by the sync loop: strict grants are charged and end (early
   * by one interval, so no token is spent after its lease); approximate allowances past their validity
   * fall back; keys of unreachable groups keep their allowance for `keepAllowanceMs`, then fall back, and
   * their usage closes into epochs (kept, bounded, for when the store returns).
   */
  advance(now: number, mono = now): void {
    // the wall clock stepped back (NTP): leases and validities converted to local time before the step end
    // later than the store's by the step, so every strict grant ends now and every allowance lapses
    const stepped = now < this.lastAdvanceAt;
    this.lastAdvanceAt = now;
    this.spending.length = 0;
    for (const rule of this.rules.values()) {
      const strict = rule.definition?.mode === "strict";
      for (const group of rule.groups) {
        const degradedFor = group.unreachableSince < 0 ? -1 : now - group.unreachableSince;
        for (const handle of group.handles) {
          // a key the loop meets for the first time counts as active now: a new key (checkFresh awaits its
          // first sync) is never dropped before it is sent
          if (handle.used !== 0 || handle.denied !== 0 || handle.lastActive < 0) handle.lastActive = now;
          if (strict) {
            chargeGrants(handle, now, stepped, mono, this.tickMs);
            if (handle.grants.length > 0 || handle.rate > 0) this.spending.push(handle);
          }
          if (degradedFor >= 0) advanceDegraded(handle, now, degradedFor, strict, this.degradedOptions);
          else if (!strict && handle.source === Source.Assigned && (stepped || now >= handle.validUntil))
            this.expire(handle);
        }
      }
    }
    if (this.keyCount > this.maxKeys) this.evictIdle(now);
  }

  /**
   * Between ticks (strict): notes what each key holding tokens has admitted by `mono` (strict-grants.ts); the
   * groups whose key ran dry while the store has tokens to grant, for a request before the tick.
   */
  observe(now: number, mono: number): GroupState[] | undefined {
    return observeSpending(this.spending, now, mono, this.earlyGapMs);
  }

  private evictIdle(now: number): void {
    const idleMs = Math.max(10 * this.syncIntervalMs, this.keepAllowanceMs);
    this.keyCount -= dropIdle(this.rules.values(), now, idleMs, this.keyCount - this.maxKeys);
  }
}
