// The rate limits of docs/api.md ("Check API"), attacked through the public Limiter on
// the real cluster. The checks state only what the contract promises (allow rules, retry and reset times,
// parameter changes, names), never how a script keeps its state.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisLimitStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Limiter } from "../../../functions/core/limits/limiter.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { ValidationError } from "../../../functions/core/shared/errors.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";

const MINUTE = 60_000;
const DAY = 24 * 60 * MINUTE;
/** A midnight UTC ahead of the server's clock, so states written live through the test. */
const T = Math.ceil((Date.now() + 2 * DAY) / DAY) * DAY;

let cluster: TollgateCluster;
let store: RedisLimitStore;
beforeAll(() => {
  cluster = connectCluster();
  store = new RedisLimitStore(cluster, { deadlineMs: 5_000 });
});
afterAll(async () => {
  await cluster.quit();
});

/** A limiter whose clock is far enough ahead that every `at` used below is within its bounds. */
const limiterAt = (now = T + 30 * DAY) => new Limiter({ store, clock: fixedClock(now), namespace: uniqueNamespace() });

const pathOf = (promise: Promise<unknown>) =>
  promise.then(
    () => "ok",
    (error: unknown) => (error instanceof ValidationError ? error.path : String(error)),
  );

const paramsOf = {
  "token-bucket": fc.record({
    max: fc.integer({ min: 1, max: 8 }),
    refillAmount: fc.integer({ min: 1, max: 3 }),
    refillEveryMs: fc.integer({ min: 1, max: 5_000 }),
  }),
  "sliding-window": fc.record({ max: fc.integer({ min: 1, max: 8 }), windowMs: fc.integer({ min: 1, max: 5_000 }) }),
  "sliding-log": fc.record({ max: fc.integer({ min: 1, max: 8 }), windowMs: fc.integer({ min: 1, max: 5_000 }) }),
  "fixed-window": fc.record({ max: fc.integer({ min: 1, max: 8 }), windowMs: fc.integer({ min: 1, max: 5_000 }) }),
  gcra: fc.record({
    burst: fc.integer({ min: 0, max: 6 }),
    count: fc.integer({ min: 1, max: 7 }),
    periodMs: fc.integer({ min: 1, max: 5_000 }),
  }),
} as const;
const capacityOf = (p: Record<string, number>) => (p.burst !== undefined ? p.burst + 1 : (p.max as number));

describe("review: a denial's retryAfterMs and resetAt (docs/api.md, DESIGN.md 'Check API')", () => {
  for (const algorithm of Object.keys(paramsOf) as (keyof typeof paramsOf)[]) {
    it(`${algorithm}: a denied request passes at now + retryAfterMs, not a millisecond before, and at resetAt the whole limit is back`, async () => {
      // repro: fast-check over Limiter.check (forward times, random costs); on a denial re-ask at now+r-1, now+r
      await fc.assert(
        fc.asyncProperty(
          paramsOf[algorithm] as fc.Arbitrary<Record<string, number>>,
          fc.array(fc.record({ gap: fc.integer({ min: 0, max: 3_000 }), cost: fc.integer({ min: 0, max: 8 }) }), {
            minLength: 1,
            maxLength: 12,
          }),
          fc.integer({ min: 0, max: 10_000_000 }),
          async (params, steps, offset) => {
            const limiter = limiterAt();
            const key = `k-${offset}`;
            let now = T + offset;
            const ask = (at: number, cost: number) => limiter.check({ key, algorithm, ...params, cost, at });
            for (const { gap, cost: wanted } of steps) {
              now += gap;
              const cost = Math.min(wanted, capacityOf(params));
              const result = await ask(now, cost);
              if (result.allowed) continue;
              const r = result.retryAfterMs as number;
              expect(r).toBeGreaterThanOrEqual(1);
              expect(result.resetAt, "resetAt before now + retryAfterMs").toBeGreaterThanOrEqual(now + r);
              if (r > 1) expect((await ask(now + r - 1, cost)).allowed, `passes before retry ${r}`).toBe(false);
              expect((await ask(now + r, cost)).allowed, `denied at now + retry ${r}`).toBe(true);
              // nothing else happening: at the limit's resetAt a peek sees the whole limit
              const reset = await ask(Math.max(result.resetAt, now + r), 0);
              if (reset.resetAt > now + r) {
                const full = await ask(reset.resetAt, 0);
                expect(full.remaining, "not full at resetAt").toBe(capacityOf(params));
              }
              return;
            }
          },
        ),
        { numRuns: Number(process.env.REVIEW_RUNS ?? 40) },
      );
    }, 120_000);
  }
});

describe("review: changing a limit's parameters keeps its usage (docs/api.md)", () => {
  it("sliding window: after windowMs grows from 1000 to 3000, the window the count was in still weighs", async () => {
    // repro: sliding-window max 5 windowMs 1000: 5 at T+1500; windowMs 3000 at T+2000 -> must be denied
    const limiter = limiterAt();
    const key = "grow-sw";
    for (let i = 0; i < 5; i++) {
      await limiter.check({ key, algorithm: "sliding-window", max: 5, windowMs: 1000, at: T + 1500 });
    }
    const after = await limiter.check({ key, algorithm: "sliding-window", max: 5, windowMs: 3000, at: T + 2000 });
    expect(after.allowed).toBe(false);
  });

  it("a new max applies at once everywhere; usage above it leaves remaining 0 until it drains", async () => {
    // repro: each algorithm, 6 of max 8 used, then max 3 -> denied with remaining 0
    const limiter = limiterAt();
    const specs = [
      { algorithm: "token-bucket", refillAmount: 1, refillEveryMs: 60_000 },
      { algorithm: "sliding-window", windowMs: 60_000 },
      { algorithm: "sliding-log", windowMs: 60_000 },
      { algorithm: "fixed-window", windowMs: 60_000 },
    ] as const;
    for (const spec of specs) {
      const key = `shrink-${spec.algorithm}`;
      expect((await limiter.check({ key, ...spec, max: 8, cost: 6, at: T + 10 })).allowed).toBe(true);
      const shrunk = await limiter.check({ key, ...spec, max: 3, at: T + 20 });
      expect({ algorithm: spec.algorithm, allowed: shrunk.allowed, remaining: shrunk.remaining }).toEqual({
        algorithm: spec.algorithm,
        allowed: false,
        remaining: 0,
      });
      expect(shrunk.retryAfterMs).toBeGreaterThanOrEqual(1);
    }
  });
});

describe("review: names (DESIGN.md: cannot escape the hash tag or collide)", () => {
  it("keeps keys with braces, colons, percent signs and unicode apart, each its own counter", async () => {
    // repro: fixed-window max 1: keys "{", "%7B", "}", "a:b", "a", "ключ🔑", "}{" each allowed once, then denied
    const limiter = limiterAt();
    const keys = ["{", "%7B", "%257B", "}", "%7D", "a:b", "a", "a:fixed-window", "ключ🔑", "}{", "{}", " ", "%"];
    const spec = { algorithm: "fixed-window", max: 1, windowMs: 60_000, at: T } as const;
    for (const key of keys) expect((await limiter.check({ ...spec, key })).allowed, key).toBe(true);
    for (const key of keys) expect((await limiter.check({ ...spec, key })).allowed, key).toBe(false);
  });

  it("keeps scopes apart whatever their text, and /v1/limit apart from /v1/limits", async () => {
    // repro: scope "x}:fixed-window:y" key "z" vs scope "x" key "y}:fixed-window:z"; /v1/limit key "k" vs scope "k" key "k"
    const limiter = limiterAt();
    const limit = { algorithm: "fixed-window", max: 1, windowMs: 60_000 } as const;
    const pairs = [
      { scope: "x}:fixed-window:y", key: "z" },
      { scope: "x", key: "y}:fixed-window:z" },
      { scope: "x:fixed-window", key: "y" },
      { scope: "x", key: "fixed-window:y" },
      { scope: "k", key: "k" },
      { scope: "{k}", key: "k" },
    ];
    for (const { scope, key } of pairs) {
      expect((await limiter.checkAll({ scope, limits: [{ ...limit, key }], at: T })).allowed, scope).toBe(true);
    }
    expect((await limiter.check({ ...limit, key: "k", at: T })).allowed).toBe(true);
    expect((await limiter.check({ ...limit, key: "{k}:fixed-window:k", at: T })).allowed).toBe(true);
    for (const { scope, key } of pairs) {
      expect((await limiter.checkAll({ scope, limits: [{ ...limit, key }], at: T })).allowed, scope).toBe(false);
    }
  });

  it("refuses an empty scope or key and a key listed twice in one /v1/limits, naming the field", async () => {
    // repro: key "" -> path key; scope "" -> path scope; limits [k, k] -> path limits[1].key
    const limiter = limiterAt();
    const limit = { algorithm: "fixed-window", max: 1, windowMs: 60_000 } as const;
    expect(await pathOf(limiter.check({ ...limit, key: "" }))).toBe("key");
    expect(await pathOf(limiter.checkAll({ scope: "", limits: [{ ...limit, key: "a" }] }))).toBe("scope");
    expect(
      await pathOf(
        limiter.checkAll({
          scope: "s",
          limits: [
            { ...limit, key: "a" },
            { ...limit, algorithm: "sliding-log", key: "a" },
          ],
        }),
      ),
    ).toBe("limits[1].key");
  });
});

describe("review: bounds", () => {
  it("takes `at` up to 5 minutes ahead and 365 days back, and refuses one millisecond past either", async () => {
    // repro: at = now + 300001 or now - 365d - 1 -> ValidationError "at"
    const now = T + 400 * DAY;
    const limiter = limiterAt(now);
    const spec = { key: "bounds", algorithm: "gcra", burst: 3, count: 1, periodMs: 1000 } as const;
    expect(await pathOf(limiter.check({ ...spec, at: now + 300_001 }))).toBe("at");
    expect(await pathOf(limiter.check({ ...spec, at: now - 365 * DAY - 1 }))).toBe("at");
    expect(await pathOf(limiter.check({ ...spec, at: now + 300_000 }))).toBe("ok");
    expect(await pathOf(limiter.check({ ...spec, at: now - 365 * DAY }))).toBe("ok");
  });

  it("refuses max, burst and cost near 2^53, naming the field, instead of answering with rounded numbers", async () => {
    // repro: fixed-window max 2^53 - 1 -> ValidationError "max"; cost 2^53 -> "cost"; gcra burst 2^53 -> "burst"
    const limiter = limiterAt();
    const big = 2 ** 53 - 1;
    expect(await pathOf(limiter.check({ key: "b", algorithm: "fixed-window", max: big, windowMs: 1000 }))).toBe("max");
    expect(
      await pathOf(limiter.check({ key: "b", algorithm: "fixed-window", max: 5, windowMs: 1000, cost: 2 ** 53 })),
    ).toBe("cost");
    expect(await pathOf(limiter.check({ key: "b", algorithm: "gcra", burst: big, count: 1, periodMs: 1000 }))).toBe(
      "burst",
    );
  });

  it("answers the largest valid parameters of every algorithm with cost 0, 1 and max (no store error, no overflow)", async () => {
    // repro: max 1e9, windows 365d, cost 1e9 then 1 then 0, for each algorithm
    const limiter = limiterAt(T + 400 * DAY);
    const year = 365 * DAY;
    const specs = [
      { algorithm: "token-bucket", max: 1e9, refillAmount: 1, refillEveryMs: year },
      { algorithm: "token-bucket", max: 1e9, refillAmount: 1, refillEveryMs: year, strict: true },
      { algorithm: "sliding-window", max: 1e9, windowMs: year },
      { algorithm: "fixed-window", max: 1e9, windowMs: year },
      { algorithm: "sliding-log", max: 100_000, windowMs: year },
      { algorithm: "gcra", burst: 9, count: 1, periodMs: year },
    ] as const;
    for (const spec of specs) {
      const key = `big-${spec.algorithm}-${"strict" in spec}`;
      const capacity = "max" in spec ? spec.max : spec.burst + 1;
      const full = await limiter.check({ key, ...spec, cost: capacity, at: T + 100 * DAY });
      expect(full.allowed, spec.algorithm).toBe(true);
      expect(full.remaining).toBe(0);
      const one = await limiter.check({ key, ...spec, cost: 1, at: T + 100 * DAY + 1 });
      expect(one.allowed, spec.algorithm).toBe(false);
      expect(one.retryAfterMs).toBeGreaterThanOrEqual(1);
      expect(Number.isSafeInteger(one.resetAt) && one.resetAt <= 8.64e15).toBe(true);
      expect(one.resetAt).toBeGreaterThanOrEqual(T + 100 * DAY + 1 + (one.retryAfterMs as number));
      const peek = await limiter.check({ key, ...spec, cost: 0, at: T + 100 * DAY + 2 });
      expect(peek.allowed, spec.algorithm).toBe(true);
      expect(peek.remaining).toBe(0);
    }
  });
});

describe("review: the sliding log at large counts", () => {
  it("counts 1,000 charged milliseconds exactly and lets them age out one by one", async () => {
    // repro: sliding-log max 1000 windowMs 10000: one charge per ms T..T+999, then denied until T+10000
    const limiter = limiterAt();
    const spec = { key: "log", algorithm: "sliding-log", max: 1_000, windowMs: 10_000 } as const;
    let denied = 0;
    for (let i = 0; i < 1_000; i++) if (!(await limiter.check({ ...spec, at: T + i })).allowed) denied++;
    expect(denied).toBe(0);
    const full = await limiter.check({ ...spec, at: T + 9_999 });
    expect(full).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: 1 });
    const three = await limiter.check({ ...spec, cost: 3, at: T + 10_000 });
    expect(three).toMatchObject({ allowed: false, remaining: 1, retryAfterMs: 2 });
    expect((await limiter.check({ ...spec, cost: 3, at: T + 10_002 })).allowed).toBe(true);
    expect((await limiter.check({ ...spec, at: T + 10_002 })).allowed).toBe(false);
  }, 60_000);
});
