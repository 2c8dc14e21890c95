// The local decision engine. `check` decides from this instance's allowances with no I/O, no clock read
// and no allocation. The sync loop (sync-loop.ts) calls the rest, with the time: `advance` (leases end,
// degraded mode begins), `takeRequest` (usage out, per slot group) and `applyReply` (allowances in).
import type { Decision } from "./decision.ts";
import { QuotasArgumentError } from "./errors.ts";
import {
  MAX_EPOCHS_PER_KEY,
  MAX_KEYS_PER_SYNC,
  MAX_SYNC_BODY_BYTES,
  type QuotaRule,
  quotaKeyProblem,
  type SyncEntry,
  type SyncReply,
  type SyncRequest,
  WireError,
} from "./protocol/index.ts";
import { recordAdmissions, safeShareLeft } from "./safe-share.ts";
import { type GroupState, type PendingRequest, QuotaHandle, RuleState, Source } from "./state.ts";

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
 * Strict: how many sync intervals of its recent rate an instance asks tokens for. Held tokens count in
 * the store from their grant, so each interval asked ahead costs the fleet about F / W of the limit
 * (two intervals held about 7 % of L idle). Less than the 1.2 F a reply may take: a key that runs dry
 * before its tick asks again early (`observe`, at most every `earlyGapMs`), so stock covers about half an
 * interval beyond that gap rather than the longest interval (1.25 intervals held 85-88 % at 1.2x; 0.75 with
 * early requests 89-92 %, 0.5 ran dry at N = 16: 69-71 %).
 */
const WANT_INTERVALS = 0.75;
/** Below this many requests an interval a key asks for FEW_WANT_INTERVALS (N = 64 at 1.2x: about 1). */
const FEW_PER_INTERVAL = 4;
const FEW_WANT_INTERVALS = 1.25;

/**
 * How long a rule the store does not know is left alone before asking again: a rule an operator adds
 * reaches a client within this and a tick (the target is 1 s).
 */
const NORULE_RETRY_MS = 500;

/** Observations kept per key between two ticks (the oldest goes first: its spends take the next stamp). */
const MAX_STAMPS = 16;

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
   * entries), else a new one with every key that has something to say. Undefined: nothing to send.
   */
  takeRequest(group: GroupState, now: number, mono = now): SyncRequest | undefined {
    if (group.pending) return group.pending.request;
    const rule = group.rule;
    if (now < rule.missingUntil) return undefined;
    const entries: SyncEntry[] = [];
    const handles: QuotaHandle[] = [];
    const strict = rule.definition?.mode === "strict";
    const leaseMs = rule.definition?.leaseMs ?? 0;
    const elapsedMs = group.lastSentAt < 0 ? 0 : now - group.lastSentAt;
    const seq = group.seq + 1;
    // the body's size as the HTTP transport sends it (JSON, UTF-8): the envelope, then each entry and a comma
    let bytes = Buffer.byteLength(
      JSON.stringify({
        instanceId: this.instanceId,
        rule: rule.name,
        group: group.index,
        seq,
        configVersion: rule.configVersion,
        entries: [],
      }),
    );
    for (const handle of group.handles) {
      if (entries.length === MAX_KEYS_PER_SYNC) break;
      // a demand estimate: at most what the wire carries
      const offered = Math.min(handle.used + handle.denied + handle.waiting, Number.MAX_SAFE_INTEGER);
      if (handle.waiting > 0) handle.onDemand = true;
      const rate = handle.rate;
      if (elapsedMs > 0) handle.rate = 0.5 * rate + (0.5 * offered) / elapsedMs;
      // approximate: the requests waiting for this reply (`decide`), which the store grants before any share
      const want = strict
        ? now >= handle.denyUntil
          ? this.tokensWanted(handle, offered, leaseMs, elapsedMs)
          : 0
        : handle.waiting;
      const quiet =
        offered === 0 &&
        handle.epochs.length === 0 &&
        handle.refunds.length === 0 &&
        handle.spent.length === 0 &&
        want === 0;
      // a key never assigned asks for its first allowance even before it has traffic (resolve + sync warms it)
      if (quiet && !(handle.source === Source.None && handle.assignedAt < 0)) continue;
      const entry: SyncEntry = { key: handle.key, usage: [], refunds: [], offered, want };
      if (!strict) {
        // the epochs kept while the store was away and this interval's usage, within what one entry carries
        const used = Math.min(handle.used, Number.MAX_SAFE_INTEGER);
        const epochs = used > 0 ? [...handle.epochs, now, used] : handle.epochs;
        capEpochs(epochs, MAX_EPOCHS_PER_KEY);
        for (let i = 0; i < epochs.length; i += 2) entry.usage.push([epochs[i] as number, epochs[i + 1] as number]);
      } else {
        // strict: tokens spent since the last report, per grant and stamp: the store counts them over W from
        // its now less their age (floored: a later stamp, never an earlier one)
        mergeSpent(handle.spent, MAX_EPOCHS_PER_KEY);
        let stamped = false;
        const ages: number[] = [];
        for (let i = 0; i < handle.spent.length; i += 3) {
          entry.usage.push([handle.spent[i] as number, handle.spent[i + 1] as number]);
          const age = Math.max(0, Math.floor(mono - (handle.spent[i + 2] as number)));
          ages.push(age);
          if (age > 0) stamped = true;
        }
        if (stamped) entry.spentAgo = ages;
      }
      for (let i = 0; i < handle.refunds.length; i += 2)
        entry.refunds.push([handle.refunds[i] as number, handle.refunds[i + 1] as number]);
      // a key that would take the body past the route's limit waits for the next request (the keys sent
      // go to the back of the group, so every key gets its turn)
      const size = Buffer.byteLength(JSON.stringify(entry)) + 1;
      if (entries.length > 0 && bytes + size > MAX_SYNC_BODY_BYTES) {
        handle.rate = rate; // its offered count keeps growing until it is sent: measured then
        break;
      }
      bytes += size;
      handle.epochs = [];
      handle.refunds = [];
      handle.spent = [];
      handle.used = 0;
      handle.denied = 0;
      handle.waiting = 0;
      entries.push(entry);
      handles.push(handle);
    }
    // a rule `ready()` waits for asks for its definition even before it has a key (group 0, no entries)
    if (entries.length === 0 && !(rule.awaited && !rule.known && group.index === 0)) return undefined;
    for (const handle of handles) {
      group.handles.delete(handle);
      group.handles.add(handle);
    }
    group.seq = seq;
    const request: SyncRequest = {
      instanceId: this.instanceId,
      rule: rule.name,
      group: group.index,
      seq,
      configVersion: rule.configVersion,
      entries,
    };
    group.lastSentAt = now;
    group.pending = { request, handles, strict, mono };
    return request;
  }

  /**
   * Strict: enough tokens for the key's recent rate for WANT_INTERVALS intervals (one lease and an
   * interval when the lease is shorter; a key that runs dry sooner asks again early), less
   * what it holds; 1 when it has demand. Tokens held unspent count in the store's windows from their
   * grant, so an instance holds little more than it will spend before the next sync reports it. The
   * interval is the one the loop last took when that was longer (`elapsedMs`): a loop whose timers run
   * late would otherwise run dry between replies while the store has capacity left to grant.
   */
  private tokensWanted(handle: QuotaHandle, offered: number, leaseMs: number, elapsedMs: number): number {
    const interval = Math.max(this.syncIntervalMs, elapsedMs);
    // a key with a few requests an interval (many instances sharing a limit) runs dry on chance alone with
    // short stock, and its early requests are often refused as short grants: it keeps 1.25 intervals
    const intervals = handle.rate * interval >= FEW_PER_INTERVAL ? WANT_INTERVALS : FEW_WANT_INTERVALS;
    const horizon = Math.min(intervals * interval, leaseMs + this.syncIntervalMs);
    const target = Math.ceil(handle.rate * horizon);
    // requests awaiting this sync (`decide`) need at least their cost, whatever the rate says so far
    const need = handle.waiting - Math.max(0, handle.left);
    // a key decided by `decide` asks no stock ahead near the limit (the store had less left after its last
    // grant than the fleet would hold in stock): tokens one instance holds idle count in every window while
    // another instance's request is denied under the limit, and `decide` asks for what a request needs when
    // it needs it. A key decided by `check` alone keeps its stock: it has no other way to get tokens
    if (handle.onDemand && handle.headroom < target * Math.max(1, handle.group.instances)) return Math.max(need, 0);
    const want = target - Math.max(0, handle.left);
    if (need > want && need > 0) return need;
    return want > 0 ? want : offered > 0 && handle.left < 1 ? 1 : 0;
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
        this.restore(dropped.pending, true);
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
      this.restore(pending, true);
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
      handle.ackedTotal = handle.admittedTotal - this.unreported(handle);
      handle.denyUntil = assignment.denyUntil > reply.serverTime ? toLocal(assignment.denyUntil) : 0;
      handle.tightest = tightestLimit(rule.maxes, assignment.used);
      handle.headroom = headroomOf(rule.maxes, assignment.used);
      handle.resetSeconds = Math.max(0, Math.ceil((assignment.resetAt - reply.serverTime) / 1_000));
      if (assignment.mode === "approximate") {
        // the allowance counts from the moment the request was sent: what was admitted since is spent
        handle.left = handle.denyUntil > 0 ? 0 : assignment.allowance - this.unreported(handle);
        handle.validUntil = stepped ? now : toLocal(assignment.validUntil);
      } else {
        handle.shortGrant = assignment.tokens < (pending.request.entries[i]?.want ?? 0);
        if (assignment.tokens > 0) {
          handle.grants.push(reply.serverTime, toLocal(assignment.leaseExpiresAt), assignment.tokens);
          if (handle.grants.length === 3) this.spending.push(handle);
        }
        this.chargeGrants(handle, now, stepped, mono);
      }
    });
  }

  /** Usage admitted and not yet in any request the store acknowledged. */
  private unreported(handle: QuotaHandle): number {
    let sum = handle.used;
    for (let i = 1; i < handle.epochs.length; i += 2) sum += handle.epochs[i] as number;
    return sum;
  }

  /**
   * Gives a request's usage back to its keys, to go out again under a new sequence number. `counted`: the
   * store may have applied it (an error reply, an unanswered request given up): approximate usage goes out
   * again (counting it twice only over-counts), strict spent tokens and refunds are dropped (taken off their
   * grant twice they could over-admit; dropped, the store counts the grant until its lease ends).
   */
  private restore(pending: PendingRequest, counted: boolean): void {
    const { request, handles, strict, mono } = pending;
    request.entries.forEach((entry, i) => {
      const handle = handles[i];
      if (!handle) return;
      if (!strict) handle.epochs = capEpochs([...entry.usage.flat(), ...handle.epochs], MAX_EPOCHS_PER_KEY);
      else if (!counted) {
        // each pair's stamp again from its age (floored when sent: the same stamp or a later one)
        const back = entry.usage.flatMap(([grantedAt, count], j) => [
          grantedAt,
          count,
          mono - (entry.spentAgo?.[j] ?? 0),
        ]);
        handle.spent = [...back, ...handle.spent];
      }
      if (!counted) handle.refunds = [...entry.refunds.flat(), ...handle.refunds];
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
    if (pending) this.restore(pending, true);
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
            this.chargeGrants(handle, now, stepped, mono);
            if (handle.grants.length > 0 || handle.rate > 0) this.spending.push(handle);
          }
          if (degradedFor >= 0) this.advanceDegraded(handle, now, degradedFor, strict);
          else if (!strict && handle.source === Source.Assigned && (stepped || now >= handle.validUntil))
            this.expire(handle);
        }
      }
    }
    if (this.keyCount > this.maxKeys) this.evictIdle(now);
  }

  /**
   * Between ticks (strict): notes, for each key that held tokens at the last tick, how many it had admitted
   * by `mono` (monotonic ms, read before the counts): those were spent before it. The next request reports
   * its spends with their age, so the store counts them from about when they were spent, not from the
   * report (up to an interval later). Never called on Lambda (no timers): every spend is then dated at
   * the tick that reports it.
   */
  observe(now: number, mono: number): GroupState[] | undefined {
    let early: GroupState[] | undefined;
    const gap = this.earlyGapMs;
    for (const handle of this.spending) {
      // out of tokens and denying, while the store last said it had some to grant: a request of its group
      // before the tick brings them (at most one request per group every `earlyGapMs`)
      if (
        !early?.includes(handle.group) &&
        handle.denied > 0 &&
        handle.left < 1 &&
        // the store granted all it was asked last time: scarce capacity (a short grant) waits for the tick,
        // or overloaded keys would ask twice an interval for crumbs
        !handle.shortGrant &&
        now >= handle.denyUntil &&
        !handle.group.busy &&
        // a request left unanswered (the store away) goes again at the tick, not sooner
        handle.group.pending === undefined &&
        // a store that answered with an error hears again at the tick, not every `earlyGapMs`
        !handle.group.refused &&
        handle.group.lastSentAt >= 0 &&
        now - handle.group.lastSentAt >= gap
      ) {
        early ??= [];
        early.push(handle.group);
      }
      if (handle.admittedTotal === handle.observed) continue;
      handle.observed = handle.admittedTotal;
      const stamps = handle.stamps;
      // the oldest observation goes: its spends take the next one's later stamp
      if (stamps.length >= 2 * MAX_STAMPS) stamps.splice(0, 2);
      stamps.push(mono, handle.admittedTotal);
    }
    return early;
  }

  /**
   * Strict: charges what was admitted since the last call to the oldest grants, turns grants ending before
   * the next tick into refunds, and sets `left` to the tokens still held.
   */
  private chargeGrants(handle: QuotaHandle, now: number, endAll: boolean, mono: number): void {
    const grants = handle.grants;
    // what was admitted up to each observation was spent before its stamp; the rest before `mono`. Tokens
    // admitted under the fallback (no grant) were never reserved: there is nothing to charge them to.
    const stamps = handle.stamps;
    let g = 2;
    for (let s = 0; s <= stamps.length; s += 2) {
      const upTo = s < stamps.length ? (stamps[s + 1] as number) : handle.admittedTotal;
      const stamp = s < stamps.length ? (stamps[s] as number) : mono;
      let spend = upTo - handle.charged;
      if (spend <= 0) continue;
      handle.charged = upTo;
      for (; g < grants.length && spend > 0; g += 3) {
        const take = Math.min(spend, grants[g] as number);
        if (take > 0) recordSpent(handle.spent, grants[g - 2] as number, take, stamp);
        grants[g] = (grants[g] as number) - take;
        spend -= take;
        if ((grants[g] as number) > 0) break;
      }
    }
    stamps.length = 0;
    handle.observed = handle.admittedTotal;
    const horizon = endAll ? Number.POSITIVE_INFINITY : now + this.tickMs;
    let kept = 0;
    for (let i = 0; i < grants.length; i += 3) {
      const [grantedAt, expiresAt, tokens] = [grants[i] as number, grants[i + 1] as number, grants[i + 2] as number];
      if (expiresAt <= horizon) {
        if (tokens > 0) handle.refunds.push(grantedAt, tokens);
      } else if (tokens > 0) {
        grants[kept++] = grantedAt;
        grants[kept++] = expiresAt;
        grants[kept++] = tokens;
      }
    }
    grants.length = kept;
    if (handle.source === Source.Assigned || handle.source === Source.Kept) handle.left = handle.held();
  }

  private advanceDegraded(handle: QuotaHandle, now: number, degradedFor: number, strict: boolean): void {
    recordAdmissions(handle, now, this.syncIntervalMs);
    // approximate usage of this interval becomes an epoch, reported with its time when the store returns
    if (!strict && handle.used > 0) {
      handle.epochs.push(now, handle.used);
      handle.used = 0;
      capEpochs(handle.epochs, MAX_EPOCHS_PER_KEY);
    }
    // strict tokens cannot be kept past their lease: when none are left, the fallback applies at once
    const keep = strict ? handle.grants.length > 0 : degradedFor < this.keepAllowanceMs;
    if (handle.source === Source.Kept && keep) return;
    const behaviour = handle.rule.definition?.fallback ?? this.unknownRule;
    handle.source = Source.SafeShare;
    handle.left = behaviour === "allow" ? Number.POSITIVE_INFINITY : behaviour === "deny" ? 0 : safeShareLeft(handle);
  }

  private evictIdle(now: number): void {
    const idleMs = Math.max(10 * this.syncIntervalMs, this.keepAllowanceMs);
    for (const rule of this.rules.values()) {
      for (const handle of rule.handles.values()) {
        if (this.keyCount <= this.maxKeys) return;
        if (handle.pinned || handle.used !== 0 || handle.denied !== 0 || handle.epochs.length !== 0) continue;
        if (handle.refunds.length !== 0 || handle.spent.length !== 0 || handle.grants.length !== 0) continue;
        if (handle.group.pending) continue;
        if (now - handle.lastActive < idleMs || handle.group.unreachableSince >= 0) continue;
        handle.group.handles.delete(handle);
        rule.handles.delete(handle.key);
        this.keyCount--;
      }
    }
  }
}

/**
 * Keeps at most `most` [at, count] pairs in `epochs` (oldest first): the two oldest merge at the later
 * time, counted later, so never early out of a window, and nothing is dropped. Returns `epochs`.
 */
function capEpochs(epochs: number[], most: number): number[] {
  while (epochs.length > 2 * most) {
    // at most what the wire carries (past 2^53 units, an admission of `allow` would freeze the group)
    const count = Math.min((epochs[1] as number) + (epochs[3] as number), Number.MAX_SAFE_INTEGER);
    epochs.splice(0, 4, epochs[2] as number, count);
  }
  return epochs;
}

/**
 * Adds `count` spent from the grant made at `grantedAt` before `stamp` to a [grantedAt, count, stamp, ...]
 * list (one triple per grant and stamp).
 */
function recordSpent(spent: number[], grantedAt: number, count: number, stamp: number): void {
  for (let i = 0; i < spent.length; i += 3) {
    if (spent[i] === grantedAt && spent[i + 2] === stamp) {
      spent[i + 1] = (spent[i + 1] as number) + count;
      return;
    }
  }
  spent.push(grantedAt, count, stamp);
}

/**
 * Keeps at most `most` triples in a spent list: two of the same grant merge at the later stamp (counted
 * later, never early out of a window). Grants are never merged: each leaves its own grant's bucket.
 */
function mergeSpent(spent: number[], most: number): void {
  for (let i = 0; spent.length > 3 * most && i < spent.length; i += 3) {
    for (let j = i + 3; j < spent.length; j += 3) {
      if (spent[j] !== spent[i]) continue;
      spent[i + 1] = (spent[i + 1] as number) + (spent[j + 1] as number);
      spent[i + 2] = Math.max(spent[i + 2] as number, spent[j + 2] as number);
      spent.splice(j, 3);
      j -= 3;
    }
  }
}

/** The limit with the least left in its window (ties: the first), for the headers. */
function tightestLimit(maxes: Float64Array, used: readonly number[]): number {
  let best = 0;
  let bestLeft = Number.POSITIVE_INFINITY;
  for (let i = 0; i < maxes.length; i++) {
    const left = (maxes[i] as number) - (used[i] ?? 0);
    if (left < bestLeft) {
      best = i;
      bestLeft = left;
    }
  }
  return best;
}

/** What the tightest limit had left in the store after a reply's grant. */
function headroomOf(maxes: Float64Array, used: readonly number[]): number {
  let left = Number.POSITIVE_INFINITY;
  for (let i = 0; i < maxes.length; i++) left = Math.min(left, (maxes[i] as number) - (used[i] ?? 0));
  return left;
}
