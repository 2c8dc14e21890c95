// Rate limits on the real cluster, with fixed `at` times: the seed articles' vectors and the semantics
// every algorithm shares.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { RedisLimitStore, type TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import { Limiter } from "../../functions/core/limits/limiter.ts";
import { fixedClock } from "../../functions/core/shared/clock.ts";
import { ValidationError } from "../../functions/core/shared/errors.ts";
import { connectCluster, uniqueNamespace } from "../support/cluster.ts";
import { T0 } from "../support/rules.ts";

let cluster: TollgateCluster;
let limiter: Limiter;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});
beforeEach(() => {
  limiter = new Limiter({
    store: new RedisLimitStore(cluster, { deadlineMs: 2_000 }),
    clock: fixedClock(T0 + 86_400_000),
    namespace: uniqueNamespace(),
  });
});

const MINUTE = 60_000;

describe("limits", () => {
  it("sliding window counter (seed 002): 3 before, 2 now, 25% in: 3 × 0.75 + 2 = 4.25 > 4, denied", async () => {
    const start = T0 + 10 * MINUTE; // epoch-aligned
    const wide = { key: "seed2", algorithm: "sliding-window", max: 100, windowMs: MINUTE } as const;
    for (let i = 0; i < 3; i++) await limiter.check({ ...wide, at: start - 40_000 });
    for (let i = 0; i < 2; i++) await limiter.check({ ...wide, at: start + 1_000 });
    // the same usage under the real limit of 4 (changing parameters keeps the usage)
    const denied = await limiter.check({ ...wide, max: 4, at: start + 15_000 });
    expect(denied).toMatchObject({ allowed: false, limit: 4, remaining: 0, resetAt: start + MINUTE });
    // it fits once 3 × (1 − e) + 2 + 1 ≤ 4, i.e. e ≥ 2/3 of the window
    expect(denied.retryAfterMs).toBe(start + 40_000 - (start + 15_000));
    expect((await limiter.check({ ...wide, max: 4, at: start + 40_000 })).allowed).toBe(true);
  });

  it("token bucket (seed 003): max 2, refill every 60 s: allowed, allowed, denied; after 60 s allowed", async () => {
    const bucket = { key: "seed3", algorithm: "token-bucket", max: 2, refillAmount: 1, refillEveryMs: MINUTE } as const;
    const verdicts = [];
    for (let i = 0; i < 3; i++) verdicts.push((await limiter.check({ ...bucket, at: T0 })).allowed);
    expect(verdicts).toEqual([true, true, false]);
    expect((await limiter.check({ ...bucket, at: T0 + MINUTE })).allowed).toBe(true);
  });

  it("strict token bucket: hammering while empty keeps it empty; a quiet refill period refills it", async () => {
    const bucket = {
      key: "strict",
      algorithm: "token-bucket",
      max: 2,
      refillAmount: 1,
      refillEveryMs: MINUTE,
      strict: true,
    } as const;
    await limiter.check({ ...bucket, at: T0 });
    await limiter.check({ ...bucket, at: T0 });
    expect((await limiter.check({ ...bucket, at: T0 + 30_000 })).allowed).toBe(false); // restarts the clock
    expect((await limiter.check({ ...bucket, at: T0 + 70_000 })).allowed).toBe(false); // only 40 s quiet
    const stillEmpty = await limiter.check({ ...bucket, at: T0 + 129_000 }); // 59 s quiet
    expect(stillEmpty).toMatchObject({ allowed: false, remaining: 0 });
    expect((await limiter.check({ ...bucket, at: T0 + 129_000 + MINUTE })).allowed).toBe(true);
    // non-strict, the same hammering would have refilled at T0 + 60 s
    const plain = { ...bucket, key: "plain", strict: false };
    await limiter.check({ ...plain, at: T0 });
    await limiter.check({ ...plain, at: T0 });
    await limiter.check({ ...plain, at: T0 + 30_000 });
    expect((await limiter.check({ ...plain, at: T0 + 70_000 })).allowed).toBe(true);
  });

  it("denies a request larger than what is left and charges nothing, for every exact algorithm", async () => {
    const specs = [
      { key: "fw", algorithm: "fixed-window", max: 2000, windowMs: 1000 },
      { key: "sl", algorithm: "sliding-log", max: 2000, windowMs: 1000 },
      { key: "sw", algorithm: "sliding-window", max: 2000, windowMs: 1000 },
      { key: "tb", algorithm: "token-bucket", max: 2000, refillAmount: 2000, refillEveryMs: 1000 },
    ] as const;
    for (const spec of specs) {
      const got = [];
      for (const cost of [1000, 1500, 500, 400, 100, 1]) {
        const r = await limiter.check({ ...spec, cost, at: T0 + 5_000 });
        got.push(`${r.allowed ? "allowed" : "denied"} ${r.remaining}`);
      }
      expect(got, spec.algorithm).toEqual([
        "allowed 1000",
        "denied 1000",
        "allowed 500",
        "allowed 100",
        "allowed 0",
        "denied 0",
      ]);
    }
  });

  it("GCRA: burst 4, 1/s: five at t=0 (4, 3, 2, 1, 0 left), the sixth retries after 1 s; at 3 s one more with 2 left", async () => {
    const gcra = { key: "gcra", algorithm: "gcra", burst: 4, count: 1, periodMs: 1000 } as const;
    const remaining = [];
    for (let i = 0; i < 5; i++) {
      const r = await limiter.check({ ...gcra, at: T0 });
      expect(r.allowed).toBe(true);
      remaining.push(r.remaining);
    }
    expect(remaining).toEqual([4, 3, 2, 1, 0]);
    expect(await limiter.check({ ...gcra, at: T0 })).toMatchObject({
      allowed: false,
      limit: 5,
      remaining: 0,
      retryAfterMs: 1000,
    });
    expect(await limiter.check({ ...gcra, at: T0 + 3000 })).toMatchObject({ allowed: true, remaining: 2 });
  });

  it("global and category limits (seed 004) are charged all or nothing, and the reply names the level that denied", async () => {
    const request = (category: string, at: number) => ({
      scope: "user-42",
      at,
      limits: [
        { key: "global", algorithm: "sliding-log", max: 10, windowMs: MINUTE },
        { key: `category:${category}`, algorithm: "sliding-log", max: 3, windowMs: MINUTE },
      ],
    });
    for (let i = 0; i < 3; i++) expect((await limiter.checkAll(request("promo", T0 + i))).allowed).toBe(true);
    const fourth = await limiter.checkAll(request("promo", T0 + 3));
    expect(fourth.allowed).toBe(false);
    expect(fourth.results.map((r) => [r.key, r.allowed, r.remaining])).toEqual([
      ["global", true, 7],
      ["category:promo", false, 0],
    ]);
    // the denied request charged neither level: 7 more fit globally
    for (const category of ["news", "news", "news", "alerts", "alerts", "alerts", "digest"]) {
      expect((await limiter.checkAll(request(category, T0 + 10))).allowed).toBe(true);
    }
    const full = await limiter.checkAll(request("digest", T0 + 11));
    expect(full.results.map((r) => [r.key, r.allowed])).toEqual([
      ["global", false],
      ["category:digest", true],
    ]);
    expect(full.results[0]!.retryAfterMs).toBe(MINUTE - 11);
  });

  it("allows exactly the limit under 200 concurrent requests, for every exact algorithm", async () => {
    const specs = [
      { key: "c-tb", algorithm: "token-bucket", max: 50, refillAmount: 1, refillEveryMs: 3_600_000 },
      { key: "c-fw", algorithm: "fixed-window", max: 50, windowMs: 3_600_000 },
      { key: "c-sl", algorithm: "sliding-log", max: 50, windowMs: 3_600_000 },
      { key: "c-sw", algorithm: "sliding-window", max: 50, windowMs: 3_600_000 },
      { key: "c-gcra", algorithm: "gcra", burst: 49, count: 1, periodMs: 3_600_000 },
    ] as const;
    for (const spec of specs) {
      const results = await Promise.all(Array.from({ length: 200 }, () => limiter.check({ ...spec, at: T0 + 60_000 })));
      expect(results.filter((r) => r.allowed).length, spec.algorithm).toBe(50);
    }
  });

  it("peeks with cost 0, keeps usage when parameters change, and refuses a cost no limit could allow", async () => {
    const window = { key: "p", algorithm: "fixed-window", max: 5, windowMs: MINUTE } as const;
    for (let i = 0; i < 3; i++) await limiter.check({ ...window, at: T0 });
    expect(await limiter.check({ ...window, cost: 0, at: T0 })).toMatchObject({ allowed: true, remaining: 2 });
    expect(await limiter.check({ ...window, cost: 0, at: T0 })).toMatchObject({ allowed: true, remaining: 2 });
    expect(await limiter.check({ ...window, max: 4, cost: 0, at: T0 })).toMatchObject({ remaining: 1 });
    await expect(limiter.check({ ...window, cost: 6, at: T0 })).rejects.toThrow(
      "cost: cost 6 is more than this limit can ever allow (5)",
    );
    await expect(
      limiter.check({ key: "g", algorithm: "gcra", burst: 2, count: 1, periodMs: 1000, cost: 4 }),
    ).rejects.toThrow(ValidationError);
  });

  it("names the field of a bad request", async () => {
    const cases: [unknown, string][] = [
      [{ key: "k", algorithm: "leaky-bucket", max: 1, windowMs: 1 }, "algorithm"],
      [{ key: "k", algorithm: "fixed-window", max: 1 }, "windowMs"],
      [{ key: "k", algorithm: "fixed-window", max: 1, windowMs: 1000, cost: -1 }, "cost"],
      [{ key: "", algorithm: "fixed-window", max: 1, windowMs: 1000 }, "key"],
      [{ key: "k", algorithm: "token-bucket", max: 0, refillAmount: 1, refillEveryMs: 1 }, "max"],
      // the limiter's clock is T0 + 1 day: more than 5 minutes ahead of it is refused
      [{ key: "k", algorithm: "fixed-window", max: 1, windowMs: 1000, at: T0 + 86_400_000 + 300_001 }, "at"],
    ];
    for (const [request, path] of cases) {
      const error = await limiter.check(request).catch((e: unknown) => e);
      expect(error, JSON.stringify(request)).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).path).toBe(path);
    }
    const many = await limiter.checkAll({ scope: "s", limits: [] }).catch((e: unknown) => e);
    expect((many as ValidationError).path).toBe("limits");
  });
});
