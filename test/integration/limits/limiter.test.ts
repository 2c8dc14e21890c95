// Rate limits through the Limiter on the real cluster, with fixed `at` times: the seed articles' vectors,
// the semantics every algorithm shares, and the hostile-but-valid requests of the check API issue.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { RedisLimitStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Limiter } from "../../../functions/core/limits/limiter.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { ValidationError } from "../../../functions/core/shared/errors.ts";
import { limitKey } from "../../../sdk/src/protocol/index.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
/** A midnight UTC one to two days ahead of the server's clock: every state written lives through a test. */
const T = Math.ceil((Date.now() + DAY) / DAY) * DAY;

let cluster: TollgateCluster;
let store: RedisLimitStore;
let namespace: string;
let limiter: Limiter;
beforeAll(() => {
  cluster = connectCluster();
  store = new RedisLimitStore(cluster, { deadlineMs: 2_000 });
});
afterAll(async () => {
  await cluster.quit();
});
beforeEach(() => {
  namespace = uniqueNamespace();
  limiter = new Limiter({ store, clock: fixedClock(T + DAY), namespace });
});

const pathOf = (promise: Promise<unknown>) =>
  promise.then(
    () => "no error",
    (error: unknown) => (error instanceof ValidationError ? error.path : String(error)),
  );

describe("seed vectors", () => {
  it("sliding window counter (seed 002): 3 before, 2 now, 25% in: 3 × 0.75 + 2 = 4.25 > 4, denied", async () => {
    const start = T + 10 * MINUTE; // epoch-aligned
    const wide = { key: "seed2", algorithm: "sliding-window", max: 100, windowMs: MINUTE } as const;
    for (let i = 0; i < 3; i++) await limiter.check({ ...wide, at: start - 40_000 });
    for (let i = 0; i < 2; i++) await limiter.check({ ...wide, at: start + 1_000 });
    // the same usage under the real limit of 4 (changing max keeps the usage)
    const denied = await limiter.check({ ...wide, max: 4, at: start + 15_000 });
    // all capacity is back once this window's 2 have aged out: at the end of the next window
    expect(denied).toMatchObject({ allowed: false, limit: 4, remaining: 0, resetAt: start + 2 * MINUTE });
    // it fits once 3 × (1 − e) + 2 + 1 ≤ 4, i.e. e ≥ 2/3 of the window
    expect(denied.retryAfterMs).toBe(start + 40_000 - (start + 15_000));
    expect((await limiter.check({ ...wide, max: 4, at: start + 40_000 })).allowed).toBe(true);
  });

  it("token bucket (seed 003): max 2, refill every 60 s: allowed, allowed, denied; after 60 s allowed", async () => {
    const bucket = { key: "seed3", algorithm: "token-bucket", max: 2, refillAmount: 1, refillEveryMs: MINUTE } as const;
    const verdicts = [];
    for (let i = 0; i < 3; i++) verdicts.push((await limiter.check({ ...bucket, at: T })).allowed);
    expect(verdicts).toEqual([true, true, false]);
    expect((await limiter.check({ ...bucket, at: T + MINUTE })).allowed).toBe(true);
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
    await limiter.check({ ...bucket, at: T });
    await limiter.check({ ...bucket, at: T });
    expect((await limiter.check({ ...bucket, at: T + 30_000 })).allowed).toBe(false); // restarts the clock
    expect((await limiter.check({ ...bucket, at: T + 70_000 })).allowed).toBe(false); // only 40 s quiet
    const stillEmpty = await limiter.check({ ...bucket, at: T + 129_000 }); // 59 s quiet
    expect(stillEmpty).toMatchObject({ allowed: false, remaining: 0 });
    expect((await limiter.check({ ...bucket, at: T + 129_000 + MINUTE })).allowed).toBe(true);
    // non-strict, the same hammering would have refilled at T + 60 s
    const plain = { ...bucket, key: "plain", strict: false };
    await limiter.check({ ...plain, at: T });
    await limiter.check({ ...plain, at: T });
    await limiter.check({ ...plain, at: T + 30_000 });
    expect((await limiter.check({ ...plain, at: T + 70_000 })).allowed).toBe(true);
  });

  it("GCRA: burst 4, 1/s: five at t=0 (4, 3, 2, 1, 0 left), the sixth retries after 1 s; at 3 s one more with 2 left", async () => {
    const gcra = { key: "gcra", algorithm: "gcra", burst: 4, count: 1, periodMs: 1000 } as const;
    const remaining = [];
    for (let i = 0; i < 5; i++) {
      const r = await limiter.check({ ...gcra, at: T });
      expect(r.allowed).toBe(true);
      remaining.push(r.remaining);
    }
    expect(remaining).toEqual([4, 3, 2, 1, 0]);
    expect(await limiter.check({ ...gcra, at: T })).toMatchObject({
      allowed: false,
      limit: 5,
      remaining: 0,
      retryAfterMs: 1000,
    });
    expect(await limiter.check({ ...gcra, at: T + 3000 })).toMatchObject({ allowed: true, remaining: 2 });
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
    for (let i = 0; i < 3; i++) expect((await limiter.checkAll(request("promo", T + i))).allowed).toBe(true);
    const fourth = await limiter.checkAll(request("promo", T + 3));
    expect(fourth.allowed).toBe(false);
    expect(fourth.results.map((r) => [r.key, r.allowed, r.remaining])).toEqual([
      ["global", true, 7],
      ["category:promo", false, 0],
    ]);
    // the denied request charged neither level: 7 more fit globally
    for (const category of ["news", "news", "news", "alerts", "alerts", "alerts", "digest"]) {
      expect((await limiter.checkAll(request(category, T + 10))).allowed).toBe(true);
    }
    const full = await limiter.checkAll(request("digest", T + 11));
    expect(full.results.map((r) => [r.key, r.allowed])).toEqual([
      ["global", false],
      ["category:digest", true],
    ]);
    expect(full.results[0]!.retryAfterMs).toBe(MINUTE - 11);
  });
});

describe("shared semantics", () => {
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
        const r = await limiter.check({ ...spec, cost, at: T + 5_000 });
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

  it("allows exactly the limit under 200 concurrent requests, for every algorithm", async () => {
    const specs = [
      { key: "c-tb", algorithm: "token-bucket", max: 50, refillAmount: 1, refillEveryMs: 3_600_000 },
      { key: "c-fw", algorithm: "fixed-window", max: 50, windowMs: 3_600_000 },
      { key: "c-sl", algorithm: "sliding-log", max: 50, windowMs: 3_600_000 },
      { key: "c-sw", algorithm: "sliding-window", max: 50, windowMs: 3_600_000 },
      { key: "c-gcra", algorithm: "gcra", burst: 49, count: 1, periodMs: 3_600_000 },
    ] as const;
    for (const spec of specs) {
      const results = await Promise.all(Array.from({ length: 200 }, () => limiter.check({ ...spec, at: T + 60_000 })));
      expect(results.filter((r) => r.allowed).length, spec.algorithm).toBe(50);
    }
  });

  it("peeks with cost 0, keeps usage when max changes, and refuses a cost no limit could allow", async () => {
    const window = { key: "p", algorithm: "fixed-window", max: 5, windowMs: MINUTE } as const;
    for (let i = 0; i < 3; i++) await limiter.check({ ...window, at: T });
    expect(await limiter.check({ ...window, cost: 0, at: T })).toMatchObject({ allowed: true, remaining: 2 });
    expect(await limiter.check({ ...window, cost: 0, at: T })).toMatchObject({ allowed: true, remaining: 2 });
    expect(await limiter.check({ ...window, max: 4, cost: 0, at: T })).toMatchObject({ remaining: 1 });
    await expect(limiter.check({ ...window, cost: 6, at: T })).rejects.toThrow(
      "cost: cost 6 is more than this limit can ever allow (5)",
    );
    await expect(
      limiter.check({ key: "g", algorithm: "gcra", burst: 2, count: 1, periodMs: 1000, cost: 4 }),
    ).rejects.toThrow(ValidationError);
  });

  it("keeps the count of the open window when windowMs changes; the new length applies from its end", async () => {
    const window = { key: "w", algorithm: "fixed-window", max: 5, windowMs: MINUTE } as const;
    for (let i = 0; i < 3; i++) await limiter.check({ ...window, at: T + 1_000 });
    const longer = await limiter.check({ ...window, windowMs: 10 * MINUTE, at: T + 2_000 });
    // what it counts is all back at the first ten-minute boundary after the stored end (the 4 still count there)
    expect(longer).toMatchObject({ allowed: true, remaining: 1, resetAt: T + 10 * MINUTE });
    // from the stored window's end on: ten-minute windows, epoch-aligned; the 4 counted in [T, T + 1m) still
    // count in [T, T + 10m), which holds them
    expect(await limiter.check({ ...window, windowMs: 10 * MINUTE, at: T + MINUTE })).toMatchObject({
      remaining: 0,
      resetAt: T + 10 * MINUTE,
    });
    expect(await limiter.check({ ...window, windowMs: 10 * MINUTE, at: T + 10 * MINUTE })).toMatchObject({
      remaining: 4,
      resetAt: T + 20 * MINUTE,
    });
    const log = { key: "l", algorithm: "sliding-log", max: 5, windowMs: MINUTE } as const;
    for (let i = 0; i < 3; i++) await limiter.check({ ...log, at: T + 1_000 });
    expect(await limiter.check({ ...log, windowMs: 2 * MINUTE, at: T + 90_000 })).toMatchObject({ remaining: 1 });
  });

  it("token bucket usage survives a change of max as gubernator's TestChangeLimit: 99, 98, then 7, 6 at 10, then 195 at 200", async () => {
    const bucket = { key: "change", algorithm: "token-bucket", refillAmount: 1, refillEveryMs: HOUR } as const;
    const remaining = [];
    for (const max of [100, 100, 10, 10, 200])
      remaining.push((await limiter.check({ ...bucket, max, at: T })).remaining);
    expect(remaining).toEqual([99, 98, 7, 6, 195]);
  });

  it("never answers a denial with a reset before its retry time", async () => {
    // the sliding window issue: full this window, the retry falls in the next one
    const window = { key: "sw-reset", algorithm: "sliding-window", max: 2, windowMs: MINUTE } as const;
    await limiter.check({ ...window, cost: 2, at: T + 50_000 });
    const denied = await limiter.check({ ...window, at: T + 55_000 });
    expect(denied.allowed).toBe(false);
    expect(denied.resetAt).toBeGreaterThanOrEqual(T + 55_000 + (denied.retryAfterMs as number));
  });
});

describe("replay (requests dated in the past)", () => {
  it("a strict token bucket does not refill after a denied request dated 30 days ago", async () => {
    const bucket = {
      key: "strict-replay",
      algorithm: "token-bucket",
      max: 5,
      refillAmount: 5,
      refillEveryMs: HOUR,
      strict: true,
    } as const;
    await limiter.check({ ...bucket, cost: 5, at: T });
    expect((await limiter.check({ ...bucket, at: T - 30 * DAY })).allowed).toBe(false);
    expect(await limiter.check({ ...bucket, at: T + 1 })).toMatchObject({ allowed: false, remaining: 0 });
  });

  it("a full fixed or sliding window does not reopen after a request dated 2 hours ago", async () => {
    for (const algorithm of ["fixed-window", "sliding-window"] as const) {
      const window = { key: `full-${algorithm}`, algorithm, max: 5, windowMs: HOUR } as const;
      for (let i = 0; i < 5; i++) await limiter.check({ ...window, at: T + 10 * MINUTE });
      await limiter.check({ ...window, at: T - 2 * HOUR });
      const after = [];
      for (let i = 0; i < 5; i++) after.push((await limiter.check({ ...window, at: T + 11 * MINUTE })).allowed);
      expect(after, algorithm).toEqual([false, false, false, false, false]);
    }
  });

  it("a GCRA TAT and a sliding log never move back: a backfill is decided against what is there", async () => {
    const gcra = { key: "gcra-replay", algorithm: "gcra", burst: 1, count: 1, periodMs: MINUTE } as const;
    await limiter.check({ ...gcra, at: T });
    await limiter.check({ ...gcra, at: T });
    expect((await limiter.check({ ...gcra, at: T - HOUR })).allowed).toBe(false);
    expect((await limiter.check({ ...gcra, at: T + 1 })).allowed).toBe(false);
    const log = { key: "log-replay", algorithm: "sliding-log", max: 2, windowMs: MINUTE } as const;
    await limiter.check({ ...log, at: T });
    // recorded at the log's newest time, so it counts as long as a live request would
    expect(await limiter.check({ ...log, at: T - HOUR })).toMatchObject({ allowed: true, resetAt: T + MINUTE });
    expect((await limiter.check({ ...log, at: T + 1 })).allowed).toBe(false);
  });

  it("a fixed window written at the last millisecond of a past window keeps its state for the replay", async () => {
    // dated by the real clock: the window ended an hour ago, so the key's life comes from the replay floor
    const real = new Limiter({ store, namespace });
    const lastMs = Math.floor(Date.now() / HOUR) * HOUR - 1;
    const window = { key: "last-ms", algorithm: "fixed-window", max: 1, windowMs: HOUR, at: lastMs } as const;
    expect((await real.check(window)).allowed).toBe(true);
    expect(await cluster.pttl(limitKey(namespace, "fixed-window", "last-ms"))).toBeGreaterThan(50_000);
    expect((await real.check(window)).allowed).toBe(false);
  });

  it("refuses an `at` more than a year before the clock, and ahead of it by more than 5 minutes", async () => {
    const window = { key: "k", algorithm: "fixed-window", max: 1, windowMs: 1000 } as const;
    expect(await pathOf(limiter.check({ ...window, at: 0 }))).toBe("at");
    expect(await pathOf(limiter.check({ ...window, at: T + DAY - 366 * DAY }))).toBe("at");
    expect(await pathOf(limiter.check({ ...window, at: T + DAY + 300_001 }))).toBe("at");
    expect(await pathOf(limiter.checkAll({ scope: "s", at: 0, limits: [window] }))).toBe("at");
  });
});

describe("names", () => {
  it("a scope or key with braces stays in its hash tag and never meets another tenant's counter", async () => {
    const one = { algorithm: "fixed-window", max: 1, windowMs: HOUR } as const;
    // one scope: one slot, whatever its text (no CROSSSLOT)
    const braces = await limiter.checkAll({
      scope: "}{odd}",
      at: T,
      limits: [
        { ...one, key: "a" },
        { ...one, key: "}b{" },
      ],
    });
    expect(braces.allowed).toBe(true);
    // scope x + key `y}:fixed-window:z` and scope `x}:fixed-window:y` + key z are two counters
    const first = await limiter.checkAll({ scope: "x", at: T, limits: [{ ...one, key: "y}:fixed-window:z" }] });
    const second = await limiter.checkAll({ scope: "x}:fixed-window:y", at: T, limits: [{ ...one, key: "z" }] });
    expect([first.allowed, second.allowed]).toEqual([true, true]);
    // /v1/limit key k and /v1/limits scope k key k are two counters
    expect((await limiter.check({ ...one, key: "k", at: T })).allowed).toBe(true);
    expect((await limiter.checkAll({ scope: "k", at: T, limits: [{ ...one, key: "k" }] })).allowed).toBe(true);
  });
});

describe("large parameters", () => {
  it("answers a token bucket of 1e9 refilled once a year, charged 1e9, without a store error", async () => {
    const bucket = {
      key: "huge",
      algorithm: "token-bucket",
      max: 1_000_000_000,
      refillAmount: 1,
      refillEveryMs: 365 * DAY,
    } as const;
    expect(await limiter.check({ ...bucket, cost: 1_000_000_000, at: T })).toMatchObject({
      allowed: true,
      remaining: 0,
    });
    const denied = await limiter.check({ ...bucket, at: T });
    expect(denied).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: 365 * DAY });
    expect(Number.isSafeInteger(denied.resetAt)).toBe(true);
    const ttl = await cluster.pttl(limitKey(namespace, "token-bucket", "huge"));
    expect(ttl).toBeGreaterThan(365 * DAY);
    expect(ttl).toBeLessThanOrEqual(10 * 365 * DAY);
  });

  it("answers GCRA at its largest tolerance and refuses rates the integer arithmetic cannot hold", async () => {
    const gcra = { key: "wide", algorithm: "gcra", burst: 9, count: 1, periodMs: 365 * DAY } as const;
    expect(await limiter.check({ ...gcra, cost: 10, at: T })).toMatchObject({ allowed: true, remaining: 0 });
    expect(await limiter.check({ ...gcra, at: T })).toMatchObject({ allowed: false, retryAfterMs: 365 * DAY });
    expect(await pathOf(limiter.check({ ...gcra, burst: 10 }))).toBe("burst");
    expect(await pathOf(limiter.check({ ...gcra, count: 1001, periodMs: 1 }))).toBe("count");
  });
});

describe("GCRA in integers", () => {
  it("allows the whole burst of 1 + 1 at 6 per 1000 ms at any start time (remaining 1, then 0)", async () => {
    const gcra = { algorithm: "gcra", burst: 1, count: 6, periodMs: 1000 } as const;
    for (let start = 0; start < 200; start++) {
      const key = `six-${start}`;
      const first = await limiter.check({ ...gcra, key, at: T + start * 37 });
      const second = await limiter.check({ ...gcra, key, at: T + start * 37 });
      expect([first.allowed, first.remaining, second.allowed, second.remaining], `start ${start}`).toEqual([
        true,
        1,
        true,
        0,
      ]);
    }
  });
});

describe("the sliding log", () => {
  it("adds many charges in one millisecond to one entry (no scan, no unique members)", async () => {
    const log = { key: "one-ms", algorithm: "sliding-log", max: 100_000, windowMs: MINUTE } as const;
    for (let batch = 0; batch < 10; batch++) {
      await Promise.all(Array.from({ length: 300 }, () => limiter.check({ ...log, at: T })));
    }
    const key = limitKey(namespace, "sliding-log", "one-ms");
    // the head (running total, entries, newest time and cost, base) and one entry (time, cost, cumulative
    // cost), struct-packed doubles (see lua/sliding-log.lua)
    const list = await cluster.lrangeBuffer(key, 0, -1);
    expect(list.map((b) => b.length)).toEqual([40, 24]);
    const [head, entry] = list as [Buffer, Buffer];
    expect([0, 8, 16, 24, 32].map((at) => head.readDoubleLE(at))).toEqual([3000, 1, T, 3000, 0]);
    expect([0, 8, 16].map((at) => entry.readDoubleLE(at))).toEqual([T, 3000, 3000]);
    expect(await limiter.check({ ...log, cost: 0, at: T + 1 })).toMatchObject({ remaining: 97_000 });
  });

  it("keeps the usage of a log written in the earliest layout (a head of the total alone) and rewrites it cumulative", async () => {
    const log = { key: "old-layout", algorithm: "sliding-log", max: 10, windowMs: MINUTE } as const;
    const key = limitKey(namespace, "sliding-log", "old-layout");
    const double = (...values: number[]) => {
      const buffer = Buffer.alloc(8 * values.length);
      for (const [i, value] of values.entries()) buffer.writeDoubleLE(value, 8 * i);
      return buffer;
    };
    // 3 charged at T - 30 s and 4 at T - 10 s, as the earlier script wrote them
    await cluster.rpush(key, double(7), double(T - 30_000, 3), double(T - 10_000, 4));
    await cluster.pexpire(key, 10 * MINUTE);
    expect(await limiter.check({ ...log, cost: 0, at: T })).toMatchObject({ allowed: true, remaining: 3 });
    expect(await limiter.check({ ...log, cost: 3, at: T })).toMatchObject({ allowed: true, remaining: 0 });
    expect(await limiter.check({ ...log, at: T + 1 })).toMatchObject({ allowed: false });
    const list = await cluster.lrangeBuffer(key, 0, -1);
    expect(list.map((b) => b.length)).toEqual([40, 24, 24, 24]);
    // entries hold their costs and the cumulative ones: 3, 3 + 4, 7 + 3
    expect(list.slice(1).map((b) => [b.readDoubleLE(8), b.readDoubleLE(16)])).toEqual([
      [3, 3],
      [4, 7],
      [3, 10],
    ]);
    expect(await cluster.pttl(key)).toBeGreaterThan(9 * MINUTE);
    // the charges of T - 30 s leave the window at T + 30 s: 3 free again, the head counts them out (base 3)
    expect(await limiter.check({ ...log, cost: 3, at: T + 30_000 })).toMatchObject({ allowed: true, remaining: 0 });
    const after = await cluster.lrangeBuffer(key, 0, -1);
    expect([0, 8, 16, 24, 32].map((at) => (after[0] as Buffer).readDoubleLE(at))).toEqual([10, 3, T + 30_000, 3, 3]);
  });
});

describe("strict requests", () => {
  it("names the field of a bad request: unknown fields, duplicate keys, bad values", async () => {
    const cases: [unknown, string][] = [
      [{ key: "k", algorithm: "leaky-bucket", max: 1, windowMs: 1 }, "algorithm"],
      [{ key: "k", algorithm: "fixed-window", max: 1 }, "windowMs"],
      [{ key: "k", algorithm: "fixed-window", max: 1, windowMs: 1000, cost: -1 }, "cost"],
      [{ key: "", algorithm: "fixed-window", max: 1, windowMs: 1000 }, "key"],
      [{ key: "k", algorithm: "token-bucket", max: 0, refillAmount: 1, refillEveryMs: 1 }, "max"],
      [{ key: "k", algorithm: "token-bucket", max: 1, refillAmount: 1, refillEveryMs: 1, strcit: true }, "strcit"],
      [{ key: "k", algorithm: "fixed-window", max: 1, windowMs: 1000, onStoreError: "maybe" }, "onStoreError"],
    ];
    for (const [request, path] of cases)
      expect(await pathOf(limiter.check(request)), JSON.stringify(request)).toBe(path);
    const limit = { key: "a", algorithm: "fixed-window", max: 1, windowMs: 1000 } as const;
    const many: [unknown, string][] = [
      [{ scope: "s", limits: [] }, "limits"],
      [{ scope: "s", limits: [limit], extra: 1 }, "extra"],
      [{ scope: "s", limits: [{ ...limit, at: T }] }, "limits[0].at"],
      [{ scope: "s", limits: [limit, { ...limit, max: 2 }] }, "limits[1].key"],
      [{ scope: "s", limits: [{ ...limit, cost: 2 }] }, "limits[0].cost"],
    ];
    for (const [request, path] of many) {
      expect(await pathOf(limiter.checkAll(request)), JSON.stringify(request)).toBe(path);
    }
  });

  it("charges each limit of /v1/limits its own cost when it has one, the request's otherwise", async () => {
    const request = {
      scope: "costs",
      at: T,
      cost: 2,
      limits: [
        { key: "bytes", algorithm: "fixed-window", max: 1000, windowMs: MINUTE, cost: 300 },
        { key: "calls", algorithm: "fixed-window", max: 10, windowMs: MINUTE },
      ],
    };
    const reply = await limiter.checkAll(request);
    expect(reply.results.map((r) => r.remaining)).toEqual([700, 8]);
  });
});

describe("exactness at the edges (review findings)", () => {
  const limiterAt = (now: number) => new Limiter({ store, clock: fixedClock(now), namespace: uniqueNamespace() });

  it("fixed window: after windowMs grows from 1000 to 3000, the epoch-aligned window [0, 3000) never holds more than max", async () => {
    // fixed-window max 5 windowMs 1000: 5 at T+1500; windowMs 3000 at T+2000 -> the 5 still count until T+3000
    const grown = limiterAt(T + 30 * DAY);
    const key = "grow";
    for (let i = 0; i < 5; i++) {
      expect(
        (await grown.check({ key, algorithm: "fixed-window", max: 5, windowMs: 1000, at: T + 1500 })).allowed,
      ).toBe(true);
    }
    const after = await grown.check({ key, algorithm: "fixed-window", max: 5, windowMs: 3000, at: T + 2000 });
    expect(after).toMatchObject({ allowed: false, resetAt: T + 3000, retryAfterMs: 1000 });
    const next = await grown.check({ key, algorithm: "fixed-window", max: 5, windowMs: 3000, at: T + 3000 });
    expect(next).toMatchObject({ allowed: true, remaining: 4, resetAt: T + 6000 });
  });

  it("denies when previous × (1 − elapsed/window) + current + cost exceeds max by less than a float can see", async () => {
    // sliding-window max 1e9 windowMs 1d: previous p charged, then at the elapsed time e where
    // p × (window − e) ≡ 1 (mod window), cost = max − floor(weighted) -> the exact sum is max + 1/window
    const window = DAY;
    const max = 1_000_000_000;
    // p, e such that the exact weighted previous is k + 1/window and doubles round it to <= k
    let found: { p: number; e: number; k: number } | undefined;
    for (let p = 999_999_001; p < 999_999_999 && !found; p += 2) {
      const inverse = modInverse(BigInt(p), BigInt(window));
      if (inverse === undefined) continue;
      const e = Number(((-inverse % BigInt(window)) + BigInt(window)) % BigInt(window));
      if (e <= 0) continue;
      const k = Number((BigInt(p) * BigInt(window - e)) / BigInt(window));
      if ((p * (window - e)) / window <= k) found = { p, e, k };
    }
    expect(found, "no float case found").toBeDefined();
    const { p, e, k } = found as { p: number; e: number; k: number };
    const exact = limiterAt(T + 3 * DAY);
    const spec = { key: "float", algorithm: "sliding-window", max, windowMs: window } as const;
    expect((await exact.check({ ...spec, cost: p, at: T + DAY - 1 })).allowed).toBe(true);
    const over = await exact.check({ ...spec, cost: max - k, at: T + DAY + e });
    expect(over).toMatchObject({ allowed: false, remaining: max - k - 1 });
    // one less fits exactly: k + 1/window + (max - k - 1) <= max
    expect((await exact.check({ ...spec, cost: max - k - 1, at: T + DAY + e })).allowed).toBe(true);
  });
});

function modInverse(a: bigint, m: bigint): bigint | undefined {
  let [oldR, r] = [a % m, m];
  let [oldS, s] = [1n, 0n];
  while (r !== 0n) {
    const q = oldR / r;
    [oldR, r] = [r, oldR - q * r];
    [oldS, s] = [s, oldS - q * s];
  }
  return oldR === 1n ? ((oldS % m) + m) % m : undefined;
}
