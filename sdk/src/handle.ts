// The local state of one (rule, key) on this instance, and the decision `check` returns. The hot path
// reads and writes only numbers here: no strings built, no clock, no allocation.
import type { GroupState, RuleState } from "./rule-state.ts";

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

/**
 * The answer of `check`. One object per `Quotas`, overwritten by the next check (no allocation per
 * request): read it at once, or copy what you keep.
 */
export interface Decision {
  allowed: boolean;
  /** The tightest limit's `max` (the window with the least left, as of the last sync), for `RateLimit-Limit`. */
  limit: number;
  /** What this instance may still admit until its next sync, for `RateLimit-Remaining` (Infinity: unlimited). */
  remaining: number;
  /** Seconds until the tightest window frees capacity, as of the last sync, for `RateLimit-Reset`. */
  resetSeconds: number;
  /** Seconds, at least 1 when denied, 0 when allowed, for `Retry-After`. */
  retryAfterSeconds: number;
  /** `RateLimit-Policy`, e.g. `1000;w=1, 4000;w=5`. */
  policy: string;
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
  lastActive = 0;

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
  /** Recent offered cost per ms (EWMA), for how many tokens to ask. */
  rate = 0;

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
