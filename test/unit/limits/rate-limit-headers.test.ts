// The RateLimit header fields of the check API: Reset and Retry-After name one moment on a denial, times
// are counted from the request's decision time, and each algorithm states its quota policy.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { LimitResult, LimitSpec } from "../../../functions/core/limits/limit-specs.ts";
import { policyOf, rateLimitHeaders, retryAfterSeconds } from "../../../functions/handlers/rate-limit-headers.ts";

// pinned: the decision time every header function below is given
const T = Date.UTC(2026, 10, 22, 5);
const window: LimitSpec = { key: "k", algorithm: "sliding-window", max: 10, windowMs: 60_000 };

describe("RateLimit-Reset and Retry-After", () => {
  it("name the same moment on a denial, even when the window resets sooner than the request may pass", () => {
    // a sliding window resets its current window in 5 s, but the weighted previous one holds the request 42.5 s
    const denied: LimitResult = { allowed: false, limit: 10, remaining: 0, resetAt: T + 5_000, retryAfterMs: 42_500 };
    const headers = rateLimitHeaders(denied, T, [window]);
    expect(headers["retry-after"]).toBe("43");
    expect(headers["ratelimit-reset"]).toBe("43");
  });

  it("agree for every denial: Reset never tells a client to come back before Retry-After", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 10 ** 9 }), fc.integer({ min: 1, max: 10 ** 9 }), (resetIn, retryIn) => {
        const denied = { allowed: false, limit: 5, remaining: 0, resetAt: T + resetIn, retryAfterMs: retryIn };
        const headers = rateLimitHeaders(denied, T, [window]);
        expect(headers["ratelimit-reset"]).toBe(headers["retry-after"]);
        expect(Number(headers["retry-after"]) * 1000).toBeGreaterThanOrEqual(retryIn);
      }),
      { numRuns: 200 },
    );
  });

  it("count an allowed request's reset from its decision time (its `at`), not from the server's clock", () => {
    const allowed: LimitResult = { allowed: true, limit: 10, remaining: 9, resetAt: T + 60_000 };
    const replayed = rateLimitHeaders(allowed, T, [window]);
    expect(replayed["ratelimit-reset"]).toBe("60");
    expect(replayed["retry-after"]).toBeUndefined();
    // the same result decided 59.001 s later: 1 s left, rounded up
    expect(rateLimitHeaders(allowed, T + 59_001, [window])["ratelimit-reset"]).toBe("1");
  });

  it("round Retry-After up, and never to 0 while denied", () => {
    expect(retryAfterSeconds(1)).toBe(1);
    expect(retryAfterSeconds(1000)).toBe(1);
    expect(retryAfterSeconds(1001)).toBe(2);
    expect(retryAfterSeconds(undefined)).toBe(1);
  });
});

describe("RateLimit-Policy", () => {
  it("states each algorithm's quota over the window it grants it in", () => {
    const specs: [LimitSpec, string][] = [
      [{ key: "k", algorithm: "fixed-window", max: 100, windowMs: 3_600_000 }, "100;w=3600"],
      [{ key: "k", algorithm: "sliding-log", max: 2, windowMs: 60_000 }, "2;w=60"],
      [window, "10;w=60"],
      // 10 tokens, 1 back every 6 s: a whole bucket in 60 s
      [{ key: "k", algorithm: "token-bucket", max: 10, refillAmount: 1, refillEveryMs: 6_000 }, "10;w=60"],
      // 5 tokens, 2 back every 1 s: refills come in whole steps, so 3 steps
      [{ key: "k", algorithm: "token-bucket", max: 5, refillAmount: 2, refillEveryMs: 1_000 }, "5;w=3"],
      // redis-cell: burst 4, 1 per second: 5 at once, then 1 a second
      [{ key: "k", algorithm: "gcra", burst: 4, count: 1, periodMs: 1_000 }, "5;w=5"],
      // a window under a second is stated as 1 s: w is whole seconds
      [{ key: "k", algorithm: "fixed-window", max: 3, windowMs: 250 }, "3;w=1"],
    ];
    for (const [spec, policy] of specs) expect(policyOf(spec), spec.algorithm).toBe(policy);
  });

  it("lists every limit of a /v1/limits request, in request order", () => {
    const headers = rateLimitHeaders({ allowed: true, limit: 1, remaining: 0, resetAt: T + 60_000 }, T, [
      { key: "global", algorithm: "fixed-window", max: 10, windowMs: 60_000 },
      { key: "category:promo", algorithm: "fixed-window", max: 1, windowMs: 60_000 },
    ]);
    expect(headers["ratelimit-policy"]).toBe("10;w=60, 1;w=60");
  });
});
