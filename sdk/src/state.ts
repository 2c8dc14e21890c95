// The engine's state: rules (definition from the options or a sync reply, slot groups, keys) and each
// key's handle. Mutable in place, so an operator's change reaches every resolved handle without
// re-resolving. The hot path reads and writes only a handle's numbers: no strings built, no clock.
import { type QuotaRule, type SyncRequest, slotGroupOf } from "./protocol/index.ts";

/** Where a key's allowance comes from. */
export const Source = {
  /** No allowance received yet (or it lapsed): the rule's fallback applies. */
  None: 0,
  /** The last sync reply's allowance. */
  Assigned: 1,
  /** The store is unreachable: the last allowance is kept (not replenished) for a bounded time. */
  Kept: 2,
  /** The store has been unreachable too long: at most each limit over the last known instance count. */
  SafeShare: 3,
} as const;
export type Source = (typeof Source)[keyof typeof Source];

/** One slot group of a rule: one sync call covers all its keys. */
/** A request sent and not acknowledged, with the keys of its entries and the rule's mode when it was taken. */
export interface PendingRequest {
  readonly request: SyncRequest;
  readonly handles: QuotaHandle[];
  /** Its usage is strict tokens spent per grant (a definition that changes later does not change that). */
  readonly strict: boolean;
  /** The monotonic time it was taken at: its `spentAgo` count back from it. */
  readonly mono: number;
}

export interface GroupState {
  readonly rule: RuleState;
  readonly index: number;
  readonly handles: Set<QuotaHandle>;
  /** The last sequence number used (per instance and group, from 1). */
  seq: number;
  /** Instances that synced this group lately, as the store last said (0: never heard). */
  instances: number;
  /** Local ms of the last successful sync (-1: never). */
  lastOkAt: number;
  /** Local ms since when the store has been unreachable for this group (-1: reachable). */
  unreachableSince: number;
  /** A request sent and not acknowledged: resent as is (same seq, same entries) until it is. */
  pending: PendingRequest | undefined;
  /** A sync of this group is on the wire. */
  busy: boolean;
  /** Local ms when the last new request was taken (-1: never); the key's rate is measured over the time between two. */
  lastSentAt: number;
  /** The store answered this group's last call with an error: no early request until it answers again. */
  refused: boolean;
}

/** `RateLimit-Policy` of a rule, e.g. `1000;w=1, 4000;w=5` (windows in seconds). */
export function policyHeader(rule: QuotaRule): string {
  return rule.limits.map((l) => `${l.max};w=${Math.ceil(l.windowMs / 1000)}`).join(", ");
}

export class RuleState {
  definition: QuotaRule | undefined;
  /** The version of the definition held ("" before one arrives from the store). */
  configVersion = "";
  /** Each limit's `max`, indexed like the rule's limits. */
  maxes: Float64Array = new Float64Array(0);
  policy = "";
  /** Local ms until which the store said the rule is not configured (no syncs meanwhile). */
  missingUntil = 0;
  /** `ready()` named the rule: while no definition has arrived, its group 0 asks for one with no keys. */
  awaited = false;
  /**
   * The store answered `norule` for this rule after it had a definition: removed, or lost with the store's
   * state (FLUSHALL, a node back empty). Nothing counts what a fallback share would admit: it denies (an
   * explicit `allow` still allows) until the store answers for the rule again.
   */
  gone = false;
  readonly handles = new Map<string, QuotaHandle>();
  /** The slot groups in use: the first `slotGroups` of `everyGroup`. */
  groups: GroupState[] = [];
  /** Every slot group this instance ever had for the rule, kept across a change of `slotGroups`. */
  private readonly everyGroup: GroupState[] = [];

  constructor(
    readonly name: string,
    /** Instances assumed before the store reports a count. */
    private readonly instancesHint: number,
  ) {
    this.everyGroup.push(this.newGroup(0));
    this.groups = [...this.everyGroup];
  }

  get known(): boolean {
    return this.definition !== undefined;
  }

  /** Installs a definition; returns the handles whose slot group changed (their usage moves with them). */
  define(rule: QuotaRule, configVersion: string): void {
    this.definition = rule;
    this.configVersion = configVersion;
    this.maxes = Float64Array.from(rule.limits, (l) => l.max);
    this.policy = policyHeader(rule);
    const count = Math.max(1, rule.slotGroups);
    if (count !== this.groups.length) {
      for (const group of this.groups) group.handles.clear();
      // a group dropped by a smaller count comes back with its sequence numbers: the store remembers the
      // seqs this instance used in it, so starting again from 1 would have new syncs answered duplicate
      for (let i = this.everyGroup.length; i < count; i++) this.everyGroup.push(this.newGroup(i));
      this.groups = this.everyGroup.slice(0, count);
      for (const handle of this.handles.values()) this.place(handle);
    }
  }

  /** The store has no such rule (removed): no definition until one arrives again; the slot groups stay. */
  forget(): void {
    this.definition = undefined;
    this.configVersion = "";
    this.maxes = new Float64Array(0);
    this.policy = "";
  }

  /** The slot group a key syncs with. */
  groupFor(key: string): GroupState {
    return this.groups[slotGroupOf(key, this.groups.length)] as GroupState;
  }

  place(handle: QuotaHandle): void {
    const group = this.groupFor(handle.key);
    handle.group = group;
    group.handles.add(handle);
  }

  /**
   * The safe share: the tightest of each limit over the group's last known instance count, rounded down;
   * 0 while the count is unknown, so an instance never assumes it is alone and takes the whole limit.
   */
  share(group: GroupState): number {
    if (group.instances <= 0 || this.maxes.length === 0) return 0;
    let share = Number.POSITIVE_INFINITY;
    for (let i = 0; i < this.maxes.length; i++)
      share = Math.min(share, Math.floor((this.maxes[i] as number) / group.instances));
    return share;
  }

  private newGroup(index: number): GroupState {
    return {
      rule: this,
      index,
      handles: new Set(),
      seq: 0,
      instances: this.instancesHint,
      lastOkAt: -1,
      unreachableSince: -1,
      pending: undefined,
      busy: false,
      lastSentAt: -1,
      refused: false,
    };
  }
}

export class QuotaHandle {
  /** What this instance may still admit for the key, all limits at once (the store sends the tightest). */
  left = 0;
  /** Index of the tightest limit in the rule, for the headers. */
  tightest = 0;
  /** Seconds until the tightest window frees capacity, as of the last sync. */
  resetSeconds = 1;
  /** Cost admitted since the last report was taken. */
  used = 0;
  /** Cost denied since the last report was taken. */
  denied = 0;
  /** Cost of requests awaiting this key's next sync (`decide`): demand the next request carries and asks tokens for. */
  waiting = 0;
  /** Every cost admitted since the handle was made (attribution to grants and rings reads differences). */
  admittedTotal = 0;
  source: Source = Source.None;
  /** Local ms until which the current allowance is valid (approximate). */
  validUntil = 0;
  /** Local ms until which the store said the key is exhausted (strict: ask for no tokens). */
  denyUntil = 0;
  /** Local ms of the last reply that set an allowance for this key (-1: never). */
  assignedAt = -1;
  /** Kept by `resolve`: never evicted. */
  pinned = false;
  /** Local ms of the last tick that saw activity on this key (eviction of idle keys). */
  lastActive = -1;

  // ---- approximate: usage the store has not acknowledged yet ----
  /** Closed epochs of unreported usage while the store was unreachable: [at, count, at, count, ...]. */
  epochs: number[] = [];

  // ---- strict: reserved tokens, one batch per grant, spent oldest first ----
  /** Per grant: [grantedAt (store clock), local expiry, tokens left, ...]. */
  grants: number[] = [];
  /** `admittedTotal` already charged to grants. */
  charged = 0;
  /** Expired, unused tokens not yet reported: [grantedAt, count, ...]. */
  refunds: number[] = [];
  /**
   * Tokens spent and not yet reported: [grantedAt, count, stamp, ...], all `count` spent before `stamp`
   * (monotonic ms); sent as the entry's usage and `spentAgo`.
   */
  spent: number[] = [];
  /**
   * Observations between ticks: [stamp (monotonic ms), admittedTotal then, ...]: what was admitted up to
   * that total was spent before that stamp. Charged to grants at the next tick.
   */
  stamps: number[] = [];
  /** `admittedTotal` at the last observation. */
  observed = 0;
  /** The last reply granted fewer tokens than asked: capacity is scarce, no early request. */
  shortGrant = false;
  /** Recent offered cost per ms (EWMA), for how many tokens to ask. */
  rate = 0;
  /** strict: what the tightest limit had left in the store after the last reply's grant (∞: no reply yet). */
  headroom = Number.POSITIVE_INFINITY;
  /** A request of this key waited for a sync (`decide`): it can ask for tokens when it needs them. */
  onDemand = false;

  // ---- degraded mode ----
  /** `admittedTotal` as the store knew it at the last reply (what came after is unacknowledged). */
  ackedTotal = 0;
  /** Admissions per slot, per limit (made on the first degraded tick only). */
  ring: Float64Array[] | undefined;
  /** `admittedTotal` when the ring last recorded admissions. */
  ringAdmitted = 0;

  constructor(
    readonly rule: RuleState,
    readonly key: string,
    public group: GroupState,
  ) {}

  /** Tokens held across unexpired grants (strict). */
  held(): number {
    let sum = 0;
    for (let i = 2; i < this.grants.length; i += 3) sum += this.grants[i] as number;
    return sum;
  }
}

/**
 * Drops up to `most` keys idle for `idleMs` (never a pinned one, one with anything unreported, held or pending,
 * nor one of an unreachable group); returns how many it dropped.
 */
export function dropIdle(rules: Iterable<RuleState>, now: number, idleMs: number, most: number): number {
  let dropped = 0;
  for (const rule of rules) {
    for (const handle of rule.handles.values()) {
      if (dropped >= most) return dropped;
      if (handle.pinned || handle.used !== 0 || handle.denied !== 0 || handle.epochs.length !== 0) continue;
      if (handle.refunds.length !== 0 || handle.spent.length !== 0 || handle.grants.length !== 0) continue;
      if (handle.group.pending) continue;
      if (now - handle.lastActive < idleMs || handle.group.unreachableSince >= 0) continue;
      handle.group.handles.delete(handle);
      rule.handles.delete(handle.key);
      dropped++;
    }
  }
  return dropped;
}

/** The limit with the least left in its window (ties: the first), for the headers. */
export function tightestLimit(maxes: Float64Array, used: readonly number[]): number {
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
