// redis-cell's GCRA (brandur/redis-cell, src/cell/mod.rs: Rate::per_period and RateLimiter::rate_limit),
// ported line by line to BigInt nanoseconds: the reference lua/gcra.lua is tested against. Like the
// original it works on a store of TATs and never looks at the wall clock; `now` is given.

export interface CellQuota {
  /** max_burst: the limit is burst + 1 */
  burst: number;
  /** `count` actions per `periodMs` (redis-cell takes seconds; milliseconds here, as Tollgate does) */
  count: number;
  periodMs: number;
}

export interface CellResult {
  limited: boolean;
  limit: number;
  remaining: number;
  /** ttl: until the TAT, ns */
  resetAfterNs: bigint;
  /** -1 s when not limited (or when the quantity can never fit), as redis-cell replies */
  retryAfterNs: bigint;
}

const NS_PER_MS = 1_000_000n;
const MINUS_ONE_SECOND = -1_000_000_000n;

/** Rate::per_period: the emission interval, `(ns as f64 / n as f64) as i64`. */
export function emissionIntervalNs(quota: CellQuota): bigint {
  const ns = BigInt(quota.periodMs) * NS_PER_MS;
  // Number(bigint) rounds to the nearest double, as Rust's `as f64` does; the division is IEEE in both
  return BigInt(Math.trunc(Number(ns) / quota.count));
}

/** RateLimiter::rate_limit on `store` (key -> TAT in ns), at `nowNs`. */
export function rateLimit(
  store: Map<string, bigint>,
  key: string,
  quota: CellQuota,
  quantity: number,
  nowNs: bigint,
): CellResult {
  const emissionInterval = emissionIntervalNs(quota);
  const delayVariationTolerance = emissionInterval * BigInt(quota.burst + 1);
  const result: CellResult = {
    limited: false,
    limit: quota.burst + 1,
    remaining: 0,
    retryAfterNs: MINUS_ONE_SECOND,
    resetAfterNs: MINUS_ONE_SECOND,
  };
  if (emissionInterval === 0n) throw new Error("Zero rates are not supported");
  const increment = emissionInterval * BigInt(quantity);

  const tat = store.get(key) ?? nowNs;
  const newTat = nowNs > tat ? nowNs + increment : tat + increment;
  const allowAt = newTat - delayVariationTolerance;
  const diff = nowNs - allowAt;
  let ttl: bigint;
  if (diff < 0n) {
    if (increment <= delayVariationTolerance) result.retryAfterNs = -diff;
    result.limited = true;
    ttl = tat - nowNs;
  } else {
    ttl = newTat - nowNs;
    store.set(key, newTat);
  }

  const next = delayVariationTolerance - ttl;
  if (next > -emissionInterval) {
    // whole_microseconds() truncates toward zero, as BigInt division does; then f64 division, `as i64`
    result.remaining = Math.trunc(Number(next / 1000n) / Number(emissionInterval / 1000n));
  }
  result.resetAfterNs = ttl;
  return result;
}
