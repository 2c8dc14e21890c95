// Clients whose clocks lag (as far back as the oldest `at` the API accepts) or lead (up to 5 minutes), through
// the Limiter on the real cluster: a limit's state lives as long as a request of that client can read it, by the
// function's clock, so no lagging or leading client gets a request through that a true clock denies. The
// function's clock is a fixedClock; the server's clock moving with it is played on the keys (elapseOnServer).
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisLimitStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { ALGORITHMS, type Algorithm, MAX_PAST_MS } from "../../../functions/core/limits/limit-specs.ts";
import { Limiter } from "../../../functions/core/limits/limiter.ts";
import { fixedClock, MAX_FUTURE_MS } from "../../../functions/core/shared/clock.ts";
import { connectCluster, serverClockNow, uniqueNamespace } from "../../support/cluster.ts";
import {
  checkOne,
  FixedWindowModel,
  GcraModel,
  type LimitModel,
  type ModelReply,
  SlidingLogModel,
  SlidingWindowModel,
  TokenBucketModel,
} from "../../support/limit-models.ts";
import { elapseOnServer } from "../../support/server-time.ts";

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
/**
 * The function's clock starts on a whole hour 10 days behind the server's own (read from Redis), so that no
 * request of a test is dated ahead of the server's clock, which does not move while the test plays hours
 * (elapseOnServer): lifetimes follow the requests' times and the function's clock alone, as they do in
 * production where the two clocks agree. The last test checks the server's clock on its own.
 */
const START = Math.floor((serverClockNow() - 10 * DAY) / HOUR) * HOUR;

let cluster: TollgateCluster;
let store: RedisLimitStore;
beforeAll(() => {
  cluster = connectCluster();
  store = new RedisLimitStore(cluster, { deadlineMs: 2_000 });
});
afterAll(async () => {
  await cluster.quit();
});

/** One per hour in each algorithm (GCRA: no burst, one per hour). */
const ONE_PER_HOUR = {
  "token-bucket": { algorithm: "token-bucket", max: 1, refillAmount: 1, refillEveryMs: HOUR },
  "sliding-window": { algorithm: "sliding-window", max: 1, windowMs: HOUR },
  "sliding-log": { algorithm: "sliding-log", max: 1, windowMs: HOUR },
  "fixed-window": { algorithm: "fixed-window", max: 1, windowMs: HOUR },
  gcra: { algorithm: "gcra", burst: 0, count: 1, periodMs: HOUR },
} as const;

/** A limiter on a clock at START in a fresh namespace, and how to let time pass for both sides. */
function client() {
  const clock = fixedClock(START);
  const namespace = uniqueNamespace();
  const limiter = new Limiter({ store, clock, namespace });
  const elapse = async (ms: number) => {
    clock.advance(ms);
    await elapseOnServer(cluster, namespace, ms);
  };
  return { clock, limiter, elapse };
}

describe("a client whose clock lags 2 hours", () => {
  it.each(ALGORITHMS)("%s: 1 per hour, a second request 62 s later is denied (/v1/limit)", async (algorithm) => {
    const { clock, limiter, elapse } = client();
    const limit = { key: "lagging", ...ONE_PER_HOUR[algorithm] };
    expect((await limiter.check({ ...limit, at: clock.now() - 2 * HOUR })).allowed).toBe(true);
    await elapse(62 * SECOND);
    expect(await limiter.check({ ...limit, at: clock.now() - 2 * HOUR })).toMatchObject({ allowed: false });
  });

  it.each(ALGORITHMS)("%s: 1 per hour, a second request 62 s later is denied (/v1/limits)", async (algorithm) => {
    const { clock, limiter, elapse } = client();
    const limits = [{ key: "lagging", ...ONE_PER_HOUR[algorithm] }];
    expect((await limiter.checkAll({ scope: "s", limits, at: clock.now() - 2 * HOUR })).allowed).toBe(true);
    await elapse(62 * SECOND);
    expect((await limiter.checkAll({ scope: "s", limits, at: clock.now() - 2 * HOUR })).allowed).toBe(false);
  });

  it.each(ALGORITHMS)("%s: the state is still there 1 s before the client's hour is over", async (algorithm) => {
    const { clock, limiter, elapse } = client();
    const limit = { key: "lagging", ...ONE_PER_HOUR[algorithm] };
    await limiter.check({ ...limit, at: clock.now() - 2 * HOUR });
    await elapse(HOUR - SECOND);
    expect((await limiter.check({ ...limit, cost: 0, at: clock.now() - 2 * HOUR })).remaining).toBe(0);
  });
});

describe("a client whose clock leads 5 minutes", () => {
  // not the fixed window: the true clock's request falls in the next epoch-aligned window, which is empty
  const rolling = ALGORITHMS.filter((algorithm) => algorithm !== "fixed-window");
  it.each(rolling)("%s: its charge holds for a client on a true clock until its hour is over", async (algorithm) => {
    const { clock, limiter, elapse } = client();
    const limit = { key: "leading", ...ONE_PER_HOUR[algorithm] };
    expect((await limiter.check({ ...limit, at: clock.now() + 5 * MINUTE })).allowed).toBe(true);
    await elapse(HOUR + 2 * MINUTE);
    // dated 3 minutes before the leading client's charge has aged out
    expect((await limiter.check({ ...limit, at: clock.now() })).allowed).toBe(false);
  });
});

describe("a function whose clock leads the Redis server's by 10 minutes", () => {
  // the limits whose state ends one hour after the charge (the fixed and sliding windows end on epoch boundaries)
  const fromTheCharge = ["token-bucket", "sliding-log", "gcra"] as const;
  it.each(fromTheCharge)("%s: the state lives until the server's clock has passed its hour too", async (algorithm) => {
    const server = serverClockNow();
    const namespace = uniqueNamespace();
    const limiter = new Limiter({ store, clock: fixedClock(server + 10 * MINUTE), namespace });
    await limiter.check({ key: "k", ...ONE_PER_HOUR[algorithm], at: server + 10 * MINUTE });
    const [key] = await keysOf(namespace);
    // counted from the server's clock, the earliest: the hour from the charge plus the 10 minutes
    expect(await cluster.pttl(key as string)).toBeGreaterThan(HOUR + 9 * MINUTE);
  });
});

/** The keys of `namespace` (one limit's: one key). */
async function keysOf(namespace: string): Promise<string[]> {
  const found: string[] = [];
  for (const node of cluster.nodes("master")) found.push(...(await node.keys(`${namespace}:*`)));
  return found;
}

// ---- random clock offsets within the accepted range, against the reference models ----

interface Case<P> {
  params: fc.Arbitrary<P>;
  spec: (p: P) => Record<string, unknown>;
  model: () => LimitModel<P>;
  capacity: (p: P) => number;
  span: (p: P) => number;
}

/** Whole seconds, so that the server's emulated time stays exact (see elapseOnServer). */
const seconds = (min: number, max: number) => fc.integer({ min, max }).map((s) => s * SECOND);
const windowParams = fc.record({ max: fc.integer({ min: 1, max: 5 }), windowMs: seconds(1, 3 * 3600) });
/** One algorithm's case, its parameter type erased once checked. */
const define = <P>(c: Case<P>) => c as unknown as Case<unknown>;
const cases: Record<Algorithm, Case<unknown>> = {
  "token-bucket": define({
    params: fc.record({
      max: fc.integer({ min: 1, max: 5 }),
      refillAmount: fc.integer({ min: 1, max: 3 }),
      refillEveryMs: seconds(1, 3600),
      strict: fc.boolean(),
    }),
    spec: (p) => ({ algorithm: "token-bucket", ...p }),
    model: () => new TokenBucketModel(),
    capacity: (p: { max: number }) => p.max,
    span: (p: { max: number; refillAmount: number; refillEveryMs: number }) =>
      Math.ceil(p.max / p.refillAmount) * p.refillEveryMs,
  }),
  "sliding-window": define({
    params: windowParams,
    spec: (p) => ({ algorithm: "sliding-window", ...p }),
    model: () => new SlidingWindowModel(),
    capacity: (p: { max: number }) => p.max,
    span: (p: { windowMs: number }) => p.windowMs,
  }),
  "sliding-log": define({
    params: windowParams,
    spec: (p) => ({ algorithm: "sliding-log", ...p }),
    model: () => new SlidingLogModel(),
    capacity: (p: { max: number }) => p.max,
    span: (p: { windowMs: number }) => p.windowMs,
  }),
  "fixed-window": define({
    params: windowParams,
    spec: (p) => ({ algorithm: "fixed-window", ...p }),
    model: () => new FixedWindowModel(),
    capacity: (p: { max: number }) => p.max,
    span: (p: { windowMs: number }) => p.windowMs,
  }),
  gcra: define({
    // one per period: every theoretical arrival time a whole number of seconds
    params: fc.record({ burst: fc.integer({ min: 0, max: 4 }), count: fc.constant(1), periodMs: seconds(1, 3600) }),
    spec: (p) => ({ algorithm: "gcra", ...p }),
    model: () => new GcraModel(),
    capacity: (p: { burst: number }) => p.burst + 1,
    span: (p: { burst: number; periodMs: number }) => (p.burst + 1) * p.periodMs,
  }),
};

/** A client clock's offset from the function's: lagging as far as the API accepts, or leading up to 5 minutes. */
const offset = fc.oneof(
  fc.constant(-2 * HOUR),
  fc.constant(-MAX_PAST_MS),
  fc.constant(MAX_FUTURE_MS),
  seconds(-MAX_PAST_MS / SECOND, MAX_FUTURE_MS / SECOND),
  seconds(-3 * 3600, MAX_FUTURE_MS / SECOND),
);

/** Time passing before a request, as a share of the limit's span (up to 3 spans), in whole seconds. */
const step = fc.record({
  permille: fc.oneof(
    fc.constant(0),
    fc.constant(1000),
    fc.integer({ min: 0, max: 1200 }),
    fc.integer({ min: 0, max: 3000 }),
  ),
  cost: fc.oneof(fc.constant(1), fc.integer({ min: 0, max: 5 })),
});

/** What the limiter answered, in the models' shape (retryAfterMs 0 when allowed). */
const asModel = (r: { allowed: boolean; limit: number; remaining: number; resetAt: number; retryAfterMs?: number }) =>
  ({
    allowed: r.allowed,
    limit: r.limit,
    remaining: r.remaining,
    resetAt: r.resetAt,
    retryAfterMs: r.retryAfterMs ?? 0,
  }) satisfies ModelReply;

describe.each(ALGORITHMS)("%s under any accepted client clock offset", (algorithm) => {
  const c = cases[algorithm];
  it("answers every request as the reference model does on the client's own times, the server's time moving on", async () => {
    await fc.assert(
      fc.asyncProperty(c.params, offset, fc.array(step, { minLength: 1, maxLength: 12 }), async (params, d, steps) => {
        const { clock, limiter, elapse } = client();
        const model = c.model();
        for (const { permille, cost } of steps) {
          await elapse(Math.round((permille * c.span(params)) / 1000 / SECOND) * SECOND);
          const at = clock.now() + d;
          const charge = Math.min(cost, c.capacity(params));
          const got = asModel(await limiter.check({ key: "k", ...c.spec(params), cost: charge, at }));
          expect(got, JSON.stringify({ d, at, charge, params })).toEqual(checkOne(model, at, charge, params));
        }
      }),
      { numRuns: 15 },
    );
  });
});
