// The RateLimit header fields of a rate-limit reply, as draft-ietf-httpapi-ratelimit-headers-06 defines
// them (RateLimit-Limit, -Remaining, -Reset, -Policy), and Retry-After on a denial.
import type { LimitResult, LimitSpec } from "../core/limits/limit-specs.ts";

const seconds = (ms: number) => Math.ceil(ms / 1000);

/** Whole seconds a denied request waits (never 0 while denied: a client would retry at once). */
export function retryAfterSeconds(retryAfterMs: number | undefined): number {
  return Math.max(1, seconds(retryAfterMs ?? 1));
}

/**
 * The window over which a limit grants its quota, in ms: the time to refill an empty token bucket, the
 * time GCRA takes to emit `burst + 1` units; the window itself for the others.
 */
export function policyWindowMs(spec: LimitSpec): number {
  switch (spec.algorithm) {
    case "token-bucket":
      return Math.ceil(spec.max / spec.refillAmount) * spec.refillEveryMs;
    case "gcra":
      return ((spec.burst + 1) * spec.periodMs) / spec.count;
    default:
      return spec.windowMs;
  }
}

/** One quota policy item: `quota;w=seconds` (the window rounded up to a whole second, at least 1). */
export function policyOf(spec: LimitSpec): string {
  const quota = spec.algorithm === "gcra" ? spec.burst + 1 : spec.max;
  return `${quota};w=${Math.max(1, seconds(policyWindowMs(spec)))}`;
}

/**
 * Headers of `result`, decided at `decidedAt` (the request's `at`, or now), for the limits in `specs`.
 * On a denial RateLimit-Reset names the same moment as Retry-After (the draft asks for that): a client
 * that waits for the reset may then pass. Otherwise it is when the limit's quota is whole again.
 */
export function rateLimitHeaders(
  result: LimitResult,
  decidedAt: number,
  specs: readonly LimitSpec[],
): Record<string, string> {
  const headers: Record<string, string> = {
    "ratelimit-limit": String(result.limit),
    "ratelimit-remaining": String(result.remaining),
    // one limit (POST /v1/limit) without an array and its join
    "ratelimit-policy": specs.length === 1 ? policyOf(specs[0] as LimitSpec) : specs.map(policyOf).join(", "),
  };
  if (result.allowed) {
    headers["ratelimit-reset"] = String(Math.max(0, seconds(result.resetAt - decidedAt)));
  } else {
    const retry = String(retryAfterSeconds(result.retryAfterMs));
    headers["ratelimit-reset"] = retry;
    headers["retry-after"] = retry;
  }
  return headers;
}
