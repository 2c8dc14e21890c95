// The answer of `check`: one object per Quotas, overwritten by each call (no allocation per request).

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
