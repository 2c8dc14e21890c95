// The five rate-limit scripts against their reference models (test/support/limit-models.ts) on the real
// cluster: random parameters, costs, parameter changes and out-of-order times; GCRA against a port of
// redis-cell over thousands of configurations; and the replay invariant.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { decodeLimitsReply } from "../../../functions/core/limits/limits-script.ts";
import { connectCluster, serverClockNow } from "../../support/cluster.ts";
import {
  type BucketParams,
  checkAll,
  checkOne,
  FixedWindowModel,
  GcraModel,
  type GcraParams,
  type LimitModel,
  SlidingLogModel,
  SlidingWindowModel,
  TokenBucketModel,
  type WindowParams,
} from "../../support/limit-models.ts";
import { packedLimitsArgs, runLimit, scriptStore } from "../../support/limit-scripts.ts";
import { emissionIntervalNs, rateLimit } from "../../support/redis-cell.ts";

let cluster: TollgateCluster;
let store: ReturnType<typeof scriptStore>;
beforeAll(() => {
  cluster = connectCluster();
  store = scriptStore(cluster);
});
afterAll(async () => {
  await cluster.quit();
});

const DAY = 86_400_000;
/** Request times a day ahead of the server's clock: every state lives through the test. */
const FUTURE = serverClockNow() + DAY;
const ceilMs = (ns: bigint) => Number((ns + 999_999n) / 1_000_000n);
let keys = 0;
const freshKey = () => `{lt-${process.pid}-${FUTURE}-${keys++}}`;

interface Algorithm<P> {
  name: "token-bucket" | "sliding-window" | "sliding-log" | "fixed-window" | "gcra";
  params: fc.Arbitrary<P>;
  model: () => LimitModel<P>;
  args: (p: P) => (string | number)[];
  capacity: (p: P) => number;
  /** a length of time that matters to the algorithm, to scale time steps by */
  span: (p: P) => number;
}

const windows = fc.record({ max: fc.integer({ min: 1, max: 12 }), windowMs: fc.integer({ min: 1, max: 5000 }) });
const windowArgs = (p: WindowParams) => [p.max, p.windowMs];

const algorithms: Algorithm<unknown>[] = [
  {
    name: "token-bucket",
    params: fc.record({
      max: fc.integer({ min: 1, max: 12 }),
      refillAmount: fc.integer({ min: 1, max: 5 }),
      refillEveryMs: fc.integer({ min: 1, max: 2000 }),
      strict: fc.boolean(),
    }),
    model: () => new TokenBucketModel(),
    args: (p: BucketParams) => [p.max, p.refillAmount, p.refillEveryMs, p.strict ? 1 : 0],
    capacity: (p: BucketParams) => p.max,
    span: (p: BucketParams) => p.refillEveryMs * Math.ceil(p.max / p.refillAmount),
  },
  {
    name: "sliding-window",
    params: windows,
    model: () => new SlidingWindowModel(),
    args: windowArgs,
    capacity: (p: WindowParams) => p.max,
    span: (p: WindowParams) => p.windowMs,
  },
  {
    name: "sliding-log",
    params: windows,
    model: () => new SlidingLogModel(),
    args: windowArgs,
    capacity: (p: WindowParams) => p.max,
    span: (p: WindowParams) => p.windowMs,
  },
  {
    name: "fixed-window",
    params: windows,
    model: () => new FixedWindowModel(),
    args: windowArgs,
    capacity: (p: WindowParams) => p.max,
    span: (p: WindowParams) => p.windowMs,
  },
  {
    name: "gcra",
    params: fc.record({
      burst: fc.integer({ min: 0, max: 8 }),
      count: fc.integer({ min: 1, max: 10 }),
      periodMs: fc.integer({ min: 1, max: 5000 }),
    }),
    model: () => new GcraModel(),
    args: (p: GcraParams) => [p.burst, p.count, p.periodMs],
    capacity: (p: GcraParams) => p.burst + 1,
    span: (p: GcraParams) => Math.ceil(((p.burst + 1) * p.periodMs) / p.count),
  },
] as Algorithm<unknown>[];

/** A request: a step in time relative to the limit's span (negative: out of order), a cost, which parameters. */
const step = fc.record({
  permille: fc.oneof(
    { weight: 2, arbitrary: fc.constant(0) },
    { weight: 6, arbitrary: fc.integer({ min: 0, max: 600 }) },
    { weight: 2, arbitrary: fc.integer({ min: -2000, max: 0 }) },
    { weight: 1, arbitrary: fc.integer({ min: 0, max: 4000 }) },
  ),
  cost: fc.oneof({ weight: 4, arbitrary: fc.constant(1) }, { weight: 3, arbitrary: fc.integer({ min: 0, max: 12 }) }),
  changed: fc.oneof({ weight: 5, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.boolean() }),
});

describe.each(algorithms)("$name", (algorithm) => {
  it("answers every request as the reference model does (random costs, parameter changes, out-of-order times)", async () => {
    await fc.assert(
      fc.asyncProperty(
        algorithm.params,
        algorithm.params,
        fc.integer({ min: 0, max: 10_000_000 }),
        fc.array(step, { minLength: 1, maxLength: 30 }),
        async (first, second, offset, steps) => {
          const key = freshKey();
          const model = algorithm.model();
          let now = FUTURE + offset;
          let params = first;
          for (const { permille, cost, changed } of steps) {
            if (changed) params = params === first ? second : first;
            now += Math.trunc((permille * algorithm.span(params)) / 1000);
            const charge = Math.min(cost, algorithm.capacity(params));
            const got = await runLimit(store, algorithm.name, key, now, charge, algorithm.args(params));
            const want = checkOne(model, now, charge, params);
            expect(got, JSON.stringify({ now, charge, params })).toEqual(want);
            if (!got.allowed) expect(got.resetAt).toBeGreaterThanOrEqual(now + got.retryAfterMs);
          }
        },
      ),
      { numRuns: 40 },
    );
  });

  it("never lets a backfill make a later live request succeed that would otherwise be denied", async () => {
    // Two keys get the same live requests; one also gets a request dated in the past. From then on, every
    // later request that the backfilled key would allow, the other allows too: at any later time it has at
    // least as much room (a peek's remaining is exactly the largest cost that would be allowed).
    await fc.assert(
      fc.asyncProperty(
        algorithm.params,
        fc.array(fc.record({ permille: fc.integer({ min: 0, max: 700 }), cost: fc.integer({ min: 0, max: 3 }) }), {
          minLength: 1,
          maxLength: 20,
        }),
        fc.integer({ min: 1, max: 5000 }),
        fc.integer({ min: 0, max: 12 }),
        fc.array(fc.integer({ min: 0, max: 1500 }), { minLength: 1, maxLength: 8 }),
        async (params, live, backPermille, backCost, probes) => {
          const [plain, backfilled] = [freshKey(), freshKey()];
          const args = algorithm.args(params);
          const cap = algorithm.capacity(params);
          const span = algorithm.span(params);
          let now = FUTURE;
          for (const { permille, cost } of live) {
            now += Math.trunc((permille * span) / 1000);
            await runLimit(store, algorithm.name, plain, now, Math.min(cost, cap), args);
            await runLimit(store, algorithm.name, backfilled, now, Math.min(cost, cap), args);
          }
          const backAt = now - 1 - Math.trunc((backPermille * span) / 1000);
          await runLimit(store, algorithm.name, backfilled, backAt, Math.min(backCost, cap), args);
          for (const permille of probes) {
            now += Math.trunc((permille * span) / 1000);
            const a = await runLimit(store, algorithm.name, plain, now, 0, args);
            const b = await runLimit(store, algorithm.name, backfilled, now, 0, args);
            expect(b.remaining, `at ${now}`).toBeLessThanOrEqual(a.remaining);
          }
        },
      ),
      { numRuns: 25 },
    );
  });
});

describe("gcra", () => {
  it("answers as redis-cell over thousands of random configurations and times", async () => {
    const quota = fc
      .record({
        burst: fc.oneof(fc.integer({ min: 0, max: 20 }), fc.integer({ min: 0, max: 1_000_000 })),
        count: fc.oneof(fc.integer({ min: 1, max: 100 }), fc.integer({ min: 1, max: 1_000_000 })),
        periodMs: fc.oneof(fc.integer({ min: 1, max: 10_000 }), fc.integer({ min: 1, max: 31_536_000_000 })),
      })
      // what the request schema allows: T >= 1 us, a tolerance of at most 10 years
      .filter((q) => q.periodMs * 1000 >= q.count && ((q.burst + 1) * q.periodMs) / q.count <= 10 * 365 * DAY);
    const configuration = fc.record({
      quota,
      offset: fc.integer({ min: 0, max: 1_000_000_000 }),
      requests: fc.array(fc.tuple(fc.integer({ min: 0, max: 2000 }), fc.integer({ min: 0, max: 30 })), {
        minLength: 1,
        maxLength: 8,
      }),
    });
    const run = async ({
      quota,
      offset,
      requests,
    }: {
      quota: GcraParams;
      offset: number;
      requests: [number, number][];
    }) => {
      const key = freshKey();
      const cell = new Map<string, bigint>();
      const interval = emissionIntervalNs(quota);
      const span = Math.max(1, Math.ceil(quota.periodMs / quota.count));
      let now = FUTURE + offset;
      for (const [permille, cost] of requests) {
        // redis-cell reads the wall clock: times only move forward here
        now += Math.trunc((permille * span) / 1000);
        const charge = Math.min(cost, quota.burst + 1);
        const got = await runLimit(store, "gcra", key, now, charge, [quota.burst, quota.count, quota.periodMs]);
        const nowNs = BigInt(now) * 1_000_000n;
        const want = rateLimit(cell, "k", quota, charge, nowNs);
        const label = JSON.stringify({ quota, now, charge });
        expect(got.allowed, label).toBe(!want.limited);
        expect(got.limit, label).toBe(want.limit);
        expect(got.resetAt, label).toBe(ceilMs(nowNs + want.resetAfterNs));
        expect(got.retryAfterMs, label).toBe(want.limited ? ceilMs(want.retryAfterNs) : 0);
        // remaining in whole ns: redis-cell's own when T is a whole number of us (it truncates to us)
        const next = interval * BigInt(quota.burst + 1) - want.resetAfterNs;
        expect(got.remaining, label).toBe(next > 0n ? Number(next / interval) : 0);
        if (interval % 1000n === 0n) expect(got.remaining, label).toBe(Math.max(0, want.remaining));
      }
    };
    // 50 configurations at a time, concurrently: 2,000 in all
    await fc.assert(
      fc.asyncProperty(fc.array(configuration, { minLength: 50, maxLength: 50 }), async (configurations) => {
        await Promise.all(configurations.map(run));
      }),
      { numRuns: 40 },
    );
  });

  it("allows burst + 1 at once on a fresh key, remaining counting down from burst, for any rate", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: 6 }),
        fc.integer({ min: 1, max: 1000 }),
        fc.integer({ min: 1, max: 100_000 }),
        fc.integer({ min: 0, max: 1_000_000_000 }),
        async (burst, count, periodMs, offset) => {
          fc.pre(periodMs * 1000 >= count);
          const key = freshKey();
          const now = FUTURE + offset;
          const remaining = [];
          for (let i = 0; i <= burst + 1; i++) {
            const r = await runLimit(store, "gcra", key, now, 1, [burst, count, periodMs]);
            remaining.push(r.allowed ? r.remaining : "denied");
          }
          expect(remaining).toEqual([...Array.from({ length: burst + 1 }, (_, i) => burst - i), "denied"]);
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe("limits (several, all or nothing)", () => {
  it("answers as the models do, charging every limit or none", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.integer({ min: 0, max: algorithms.length - 1 }).chain((i) =>
            (algorithms[i] as Algorithm<unknown>).params.map((params) => ({
              algorithm: algorithms[i] as Algorithm<unknown>,
              params,
            })),
          ),
          { minLength: 1, maxLength: 4 },
        ),
        fc.array(
          fc.tuple(
            fc.integer({ min: -300, max: 700 }),
            fc.array(fc.integer({ min: 0, max: 4 }), { minLength: 4, maxLength: 4 }),
          ),
          {
            minLength: 1,
            maxLength: 20,
          },
        ),
        async (limits, requests) => {
          const scope = freshKey();
          const models = limits.map((l) => l.algorithm.model());
          const span = Math.min(...limits.map((l) => l.algorithm.span(l.params)));
          let now = FUTURE;
          for (const [permille, costs] of requests) {
            now += Math.trunc((permille * span) / 1000);
            const charges = limits.map((l, i) => Math.min(costs[i] as number, l.algorithm.capacity(l.params)));
            const keys = limits.map((_, i) => `${scope}:${i}`);
            const args = packedLimitsArgs(
              now,
              limits.map((l, i) => ({
                algorithm: l.algorithm.name,
                cost: charges[i] as number,
                params: l.algorithm.args(l.params),
              })),
            );
            const results = decodeLimitsReply(await store.runLimits(keys, args), limits.length);
            const want = checkAll(
              limits.map((l, i) => ({
                model: models[i] as LimitModel<unknown>,
                cost: charges[i] as number,
                params: l.params,
              })),
              now,
            );
            const got = {
              allowed: results.every((r) => r.allowed),
              results: results.map((r) => ({ ...r, retryAfterMs: r.retryAfterMs ?? 0 })),
            };
            expect(got, JSON.stringify({ now, charges })).toEqual(want);
          }
        },
      ),
      { numRuns: 60 },
    );
  });
});
