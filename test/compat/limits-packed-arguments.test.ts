// The rate-limit scripts' packed arguments and replies (numbers as little-endian doubles in one
// argument, the one-limit reply packed, sliding-log counts as text, floor and ceil by arithmetic): through
// Limiter.check and Limiter.checkAll on the real cluster, against the previous scripts
// (test/compat/v0.2.0/, the v0.2.0 release's) run side by side on fresh keys with the same inputs, and on state the
// previous scripts wrote.
import calculateSlot from "cluster-key-slot";
import fc from "fast-check";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { limitLibrary, tollgateLibrary } from "../../functions/adapters/lua-scripts.ts";
import type { TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import { ALGORITHMS, type Algorithm } from "../../functions/core/limits/limit-specs.ts";
import { Limiter } from "../../functions/core/limits/limiter.ts";
import { fixedClock } from "../../functions/core/shared/clock.ts";
import { limitKey, loadLibrary, scopedLimitKey } from "../../sdk/src/protocol/index.ts";
import { connectCluster, serverClockNow, uniqueNamespace } from "../support/cluster.ts";
import { scriptStore } from "../support/limit-scripts.ts";
import { PreviousLimitStore } from "./limit-previous.ts";

const DAY = 86_400_000;
const YEAR = 365 * DAY;
const FIVE_MINUTES = 5 * 60_000;
const MAX_COUNT = 1_000_000_000;
/**
 * The limiters' clock, 400 days ahead of the server's: every `at` it accepts (up to 365 days back) is still
 * a month ahead of the server's clock, so no state expires while a test runs and both sides see the same.
 */
const CLOCK = serverClockNow() + 400 * DAY;

let cluster: TollgateCluster;
let current: ReturnType<typeof scriptStore>;
let previous: PreviousLimitStore;
beforeAll(() => {
  cluster = connectCluster();
  current = scriptStore(cluster);
  previous = new PreviousLimitStore(cluster);
});
afterAll(async () => {
  await cluster.quit();
});

interface Sides {
  current: Limiter;
  previous: Limiter;
  currentNs: string;
  previousNs: string;
}

/** A limiter on the current scripts and one on the previous scripts, each in a fresh namespace. */
function sides(clockAt = CLOCK): Sides {
  const clock = fixedClock(clockAt);
  const currentNs = uniqueNamespace();
  const previousNs = uniqueNamespace();
  return {
    current: new Limiter({ store: current, clock, namespace: currentNs }),
    previous: new Limiter({ store: previous, clock, namespace: previousNs }),
    currentNs,
    previousNs,
  };
}

/** What a caller sees: the result as JSON carries it (so -0 is 0), or the error's name and message. */
async function outcome(run: () => Promise<unknown>): Promise<unknown> {
  try {
    return { ok: JSON.parse(JSON.stringify(await run())) };
  } catch (error) {
    const e = error as Error & { path?: unknown };
    return { error: e.name, message: e.message, path: e.path };
  }
}

/** A number as a little-endian double. */
function double(value: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeDoubleLE(value);
  return b;
}

/**
 * A limit's stored state, byte for byte; a sliding log as what every layout of it holds (lua/sliding-log.lua):
 * the head's total, entry count, newest time and cost, and each entry's time and cost, in bytes (the current
 * layout adds a base to the head and a cumulative cost to each entry, which the previous scripts do not read;
 * it rewrites the earliest layout at a denied charge too, which the previous scripts left as it was).
 */
async function stateOf(key: string, algorithm: Algorithm): Promise<string[]> {
  if (algorithm === "sliding-log") {
    const [head, ...entries] = await cluster.lrangeBuffer(key, 0, -1);
    if (!head) return [];
    // the earliest head (the total alone) says what the four fields say, the newest entry giving the rest
    const newest = entries.at(-1) as Buffer;
    const fields =
      head.length === 8 ? Buffer.concat([head, double(entries.length), newest.subarray(0, 16)]) : head.subarray(0, 32);
    return [fields, ...entries.map((entry) => entry.subarray(0, 16))].map((b) => b.toString("hex"));
  }
  const value = await cluster.getBuffer(key);
  return value ? [value.toString("hex")] : [];
}

// ---- random limits, costs and times over the whole range validation accepts ----

const counts = fc.oneof(
  fc.integer({ min: 1, max: 12 }),
  fc.constantFrom(1, 2, MAX_COUNT - 1, MAX_COUNT),
  fc.integer({ min: 1, max: MAX_COUNT }),
);
const windows = fc.oneof(
  fc.integer({ min: 1, max: 5000 }),
  fc.constantFrom(1, 2, 1000, 60_000, DAY, YEAR - 1, YEAR),
  fc.integer({ min: 1, max: YEAR }),
);
const logMax = fc.oneof(fc.integer({ min: 1, max: 12 }), fc.constantFrom(1, 99_999, 100_000));

type Params = Record<string, number | boolean>;
const paramsOf: Record<Algorithm, fc.Arbitrary<Params>> = {
  "fixed-window": fc.record({ max: counts, windowMs: windows }),
  "sliding-window": fc.record({ max: counts, windowMs: windows }),
  "sliding-log": fc.record({ max: logMax, windowMs: windows }),
  "token-bucket": fc.record(
    { max: counts, refillAmount: counts, refillEveryMs: windows, strict: fc.boolean() },
    { requiredKeys: ["max", "refillAmount", "refillEveryMs"] },
  ),
  // some combinations are refused (count > periodMs × 1000, a burst draining past 10 years): both sides
  // must refuse them alike
  gcra: fc.record({ burst: fc.oneof(fc.constant(0), counts), count: counts, periodMs: windows }),
};

const capacityOf = (algorithm: Algorithm, p: Params) =>
  algorithm === "gcra" ? (p.burst as number) + 1 : (p.max as number);

/** A cost as a share of the limit's capacity: 0, 1, all of it, or anything between. */
const costShare = fc.oneof(
  fc.constant("zero" as const),
  fc.constant("one" as const),
  fc.constant("all" as const),
  fc.double({ min: 0, max: 1, noNaN: true }),
);
const costFor = (share: "zero" | "one" | "all" | number, capacity: number) =>
  share === "zero" ? 0 : share === "one" ? 1 : share === "all" ? capacity : Math.floor(share * capacity);

/** A step of time: the same ms, a few ms, around a window, back a little, or days ahead. */
const timeStep = fc.oneof(
  fc.constant(0),
  fc.integer({ min: 1, max: 3 }),
  fc.integer({ min: 1, max: 6000 }),
  fc.integer({ min: -2000, max: -1 }),
  fc.integer({ min: 1, max: 90 * DAY }),
);
/** Keeps `at` where validation accepts it (365 days back, 5 minutes ahead of the clock). */
const inRange = (at: number) => (at > CLOCK + FIVE_MINUTES ? CLOCK - YEAR + ((at - CLOCK) % YEAR) : at);

const step = fc.record({
  params: fc.nat(2),
  cost: costShare,
  dt: timeStep,
  withAt: fc.boolean(),
});

describe("one limit (POST /v1/limit) against the previous scripts", () => {
  for (const algorithm of ALGORITHMS) {
    it(`${algorithm}: every reply field and the stored state equal the previous scripts' over random parameters, parameter changes, costs and times`, async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(paramsOf[algorithm], { minLength: 3, maxLength: 3 }),
          fc.integer({ min: 0, max: YEAR }),
          fc.array(step, { minLength: 1, maxLength: 24 }),
          async (paramSets, startBack, steps) => {
            const s = sides();
            let at = CLOCK - startBack;
            for (const { params, cost, dt, withAt } of steps) {
              at = inRange(Math.max(CLOCK - YEAR, at + dt));
              const p = paramSets[params] as Params;
              const request = {
                key: "k",
                algorithm,
                ...p,
                cost: costFor(cost, capacityOf(algorithm, p)),
                // without `at`, the clock's time (CLOCK) decides
                ...(withAt ? { at } : {}),
              };
              const mine = await outcome(() => s.current.check(request));
              const theirs = await outcome(() => s.previous.check(request));
              expect(mine, JSON.stringify(request)).toEqual(theirs);
              expect(await stateOf(limitKey(s.currentNs, algorithm, "k"), algorithm)).toEqual(
                await stateOf(limitKey(s.previousNs, algorithm, "k"), algorithm),
              );
            }
          },
        ),
        { numRuns: 60 },
      );
    });
  }
});

/** Key and scope text holding what a packing might split on: separators, NUL, braces, long UTF-8. */
const hostileNames = [
  "k",
  "a:b",
  "a,b",
  "a|b",
  "a\u0000b",
  "\u0000",
  " ",
  "a b",
  "{",
  "}",
  "{x}",
  "}{",
  "1e21",
  "0.30000000000000004",
  "-0",
  "NaN",
  "\ud800",
  "é".repeat(256),
  "😀".repeat(128),
  "ARGV[1]",
  "fixed-window",
];

describe("several limits (POST /v1/limits) against the previous scripts", () => {
  it("every result field and every stored state equal the previous scripts' over random scopes of 1 to 16 limits of mixed algorithms, keys with separators, repeated calls and parameter changes", async () => {
    const limitArb = fc.constantFrom(...ALGORITHMS).chain((algorithm) =>
      fc.record({
        algorithm: fc.constant(algorithm),
        params: fc.array(paramsOf[algorithm], { minLength: 2, maxLength: 2 }),
        cost: fc.option(costShare, { nil: undefined }),
      }),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...hostileNames),
        fc
          .uniqueArray(fc.constantFrom(...hostileNames), { minLength: 1, maxLength: 16 })
          .chain((keys) =>
            fc.tuple(fc.constant(keys), fc.array(limitArb, { minLength: keys.length, maxLength: keys.length })),
          ),
        fc.array(
          fc.record({ pick: fc.nat(1), dt: timeStep, cost: fc.option(fc.constantFrom(0, 1, 2), { nil: undefined }) }),
          {
            minLength: 1,
            maxLength: 12,
          },
        ),
        async (scope, [keys, limits], steps) => {
          const s = sides();
          let at = CLOCK - YEAR / 2;
          for (const { pick, dt, cost } of steps) {
            at = inRange(Math.max(CLOCK - YEAR, at + dt));
            const request = {
              scope,
              at,
              ...(cost === undefined ? {} : { cost }),
              limits: limits.map((limit, i) => {
                const p = limit.params[pick] as Params;
                const own =
                  limit.cost === undefined ? {} : { cost: costFor(limit.cost, capacityOf(limit.algorithm, p)) };
                return { key: keys[i] as string, algorithm: limit.algorithm, ...p, ...own };
              }),
            };
            const mine = await outcome(() => s.current.checkAll(request));
            const theirs = await outcome(() => s.previous.checkAll(request));
            expect(mine, JSON.stringify(request)).toEqual(theirs);
            for (const limit of request.limits) {
              expect(
                await stateOf(scopedLimitKey(s.currentNs, scope, limit.algorithm, limit.key), limit.algorithm),
              ).toEqual(
                await stateOf(scopedLimitKey(s.previousNs, scope, limit.algorithm, limit.key), limit.algorithm),
              );
            }
          }
        },
      ),
      { numRuns: 60 },
    );
  });

  it("a key listed twice in one call is refused as the previous code refused it, naming the second, and charges nothing", async () => {
    const s = sides();
    const request = {
      scope: "a|b",
      at: CLOCK,
      limits: [
        { key: "x,y", algorithm: "fixed-window", max: 2, windowMs: 1000 },
        { key: "x,y", algorithm: "sliding-log", max: 2, windowMs: 1000 },
      ],
    };
    const mine = await outcome(() => s.current.checkAll(request));
    expect(mine).toEqual(await outcome(() => s.previous.checkAll(request)));
    expect(mine).toMatchObject({ error: "ValidationError", path: "limits[1].key" });
    expect(await stateOf(scopedLimitKey(s.currentNs, "a|b", "fixed-window", "x,y"), "fixed-window")).toEqual([]);
  });

  it("16 limits each at the largest parameters validation accepts, charged their whole capacity, then peeked: results equal the previous scripts'", async () => {
    const s = sides();
    const limits = [
      { algorithm: "fixed-window", max: MAX_COUNT, windowMs: YEAR },
      { algorithm: "sliding-window", max: MAX_COUNT, windowMs: YEAR },
      { algorithm: "sliding-log", max: 100_000, windowMs: YEAR },
      { algorithm: "token-bucket", max: MAX_COUNT, refillAmount: 1, refillEveryMs: YEAR, strict: true },
      { algorithm: "gcra", burst: MAX_COUNT - 1, count: MAX_COUNT, periodMs: YEAR },
    ];
    const request = (cost: number, at: number) => ({
      scope: "}{:,|\u0000 ",
      at,
      limits: Array.from({ length: 16 }, (_, i) => {
        const limit = limits[i % limits.length] as { algorithm: string; max?: number; burst?: number };
        const capacity = limit.algorithm === "gcra" ? (limit.burst as number) + 1 : (limit.max as number);
        return { key: `${i}:${"😀".repeat(i)}`, ...limit, cost: cost < 0 ? capacity : cost };
      }),
    });
    for (const [cost, at] of [
      [-1, CLOCK - YEAR],
      [0, CLOCK - YEAR],
      [1, CLOCK - YEAR + 1],
      [0, CLOCK + FIVE_MINUTES],
      [-1, CLOCK + FIVE_MINUTES],
    ] as const) {
      const mine = await outcome(() => s.current.checkAll(request(cost, at)));
      expect(mine, `cost ${cost} at ${at}`).toEqual(await outcome(() => s.previous.checkAll(request(cost, at))));
    }
  });
});

describe("state the previous scripts wrote, read by the new ones", () => {
  for (const algorithm of ALGORITHMS) {
    it(`${algorithm}: continuing on the previous scripts' state answers and stores as the previous scripts continuing it would, also across parameter changes`, async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(paramsOf[algorithm], { minLength: 3, maxLength: 3 }),
          fc.array(step, { minLength: 1, maxLength: 12 }),
          fc.array(step, { minLength: 1, maxLength: 12 }),
          async (paramSets, before, after) => {
            // both namespaces start on the previous scripts; then one switches to the new ones
            const clock = fixedClock(CLOCK);
            const switchedNs = uniqueNamespace();
            const stayedNs = uniqueNamespace();
            const oldSwitched = new Limiter({ store: previous, clock, namespace: switchedNs });
            const switched = new Limiter({ store: current, clock, namespace: switchedNs });
            const stayed = new Limiter({ store: previous, clock, namespace: stayedNs });
            let at = CLOCK - YEAR / 2;
            const requestOf = ({ params, cost, dt }: (typeof before)[number]) => {
              at = inRange(Math.max(CLOCK - YEAR, at + dt));
              const p = paramSets[params] as Params;
              return { key: "k", algorithm, ...p, cost: costFor(cost, capacityOf(algorithm, p)), at };
            };
            for (const s of before) {
              const request = requestOf(s);
              expect(await outcome(() => oldSwitched.check(request))).toEqual(
                await outcome(() => stayed.check(request)),
              );
            }
            for (const s of after) {
              const request = requestOf(s);
              const mine = await outcome(() => switched.check(request));
              expect(mine, JSON.stringify(request)).toEqual(await outcome(() => stayed.check(request)));
              expect(await stateOf(limitKey(switchedNs, algorithm, "k"), algorithm)).toEqual(
                await stateOf(limitKey(stayedNs, algorithm, "k"), algorithm),
              );
            }
          },
        ),
        { numRuns: 40 },
      );
    });
  }

  it("a sliding log in the earlier layout (an 8-byte head holding the total alone) is read and rewritten as the previous scripts do", async () => {
    const pack = (...values: number[]) => {
      const b = Buffer.alloc(8 * values.length);
      values.forEach((v, i) => {
        b.writeDoubleLE(v, 8 * i);
      });
      return b;
    };
    const window = 10_000;
    const t0 = CLOCK - DAY;
    // 7 entries of cost 1..7, a ms apart: a run of aged-out entries longer than the 2 read with the head
    const entries = Array.from({ length: 7 }, (_, i) => pack(t0 + i, i + 1));
    const total = 28;
    for (const [dt, cost, max] of [
      [window + 3, 1, 30], // 4 entries aged out (t0..t0+3)
      [window + 6, 30, 30], // denied: what remains must age out first
      [window + 6, 0, 30], // a peek
      [0, 1, 30], // dated before the newest entry
      [window * 3, 30, 30], // everything aged out
    ] as const) {
      const s = sides();
      const mineKey = limitKey(s.currentNs, "sliding-log", "k");
      const theirsKey = limitKey(s.previousNs, "sliding-log", "k");
      for (const key of [mineKey, theirsKey]) {
        await cluster.rpush(key, pack(total), ...entries);
        await cluster.pexpire(key, DAY);
      }
      const request = { key: "k", algorithm: "sliding-log", max, windowMs: window, cost, at: t0 + dt };
      const mine = await outcome(() => s.current.check(request));
      expect(mine, JSON.stringify(request)).toEqual(await outcome(() => s.previous.check(request)));
      expect(await stateOf(mineKey, "sliding-log")).toEqual(await stateOf(theirsKey, "sliding-log"));
    }
  });
});

describe("the sliding log's aged-out runs (the head now read with 2 entries, longer runs in chunks of 8, 32, ...)", () => {
  const pack = (...values: number[]) => {
    const b = Buffer.alloc(8 * values.length);
    values.forEach((v, i) => {
      b.writeDoubleLE(v, 8 * i);
    });
    return b;
  };

  it("n entries a ms apart, then a request aging out k of them (k across 0..n, runs past 2, 10 and 42): replies and the rewritten log equal the previous scripts', in both layouts of the head and on both paths", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 140 }),
        fc.nat(),
        fc.constantFrom(0, 1, 2),
        fc.constantFrom("limit", "limits"),
        fc.boolean(),
        fc.integer({ min: 1, max: 3 }),
        async (n, pick, extra, path, earlierLayout, costEach) => {
          const k = pick % (n + 1);
          const window = 1000;
          const t0 = CLOCK - DAY;
          const max = n * costEach + 5;
          const s = sides();
          const keyOf = (ns: string) =>
            path === "limit" ? limitKey(ns, "sliding-log", "k") : scopedLimitKey(ns, "s", "sliding-log", "k");
          // the log as the previous scripts wrote it (in the earlier layout: an 8-byte head, the total alone)
          const entries = Array.from({ length: n }, (_, i) => pack(t0 + i, costEach));
          const head = earlierLayout ? pack(n * costEach) : pack(n * costEach, n, t0 + n - 1, costEach);
          for (const ns of [s.currentNs, s.previousNs]) {
            await cluster.rpush(keyOf(ns), head, ...entries);
            await cluster.pexpire(keyOf(ns), DAY);
          }
          // at t0 + k - 1 + window the first k entries have aged out (an entry at the cutoff no longer counts)
          const at = t0 + window + k - 1;
          for (const cost of [extra, max]) {
            const limit = { key: "k", algorithm: "sliding-log", max, windowMs: window, cost };
            const run = (limiter: Limiter) =>
              path === "limit"
                ? limiter.check({ ...limit, at })
                : limiter.checkAll({ scope: "s", at, limits: [limit] });
            const mine = await outcome(() => run(s.current));
            expect(mine, JSON.stringify({ n, k, cost, path, earlierLayout })).toEqual(
              await outcome(() => run(s.previous)),
            );
            expect(await stateOf(keyOf(s.currentNs), "sliding-log")).toEqual(
              await stateOf(keyOf(s.previousNs), "sliding-log"),
            );
          }
        },
      ),
      { numRuns: 150 },
    );
  });
});

describe("a fleet running both versions (a rollout): calls on one key alternate between them", () => {
  for (const algorithm of ALGORITHMS) {
    it(`${algorithm}: each call on either version answers and stores as the previous scripts alone would`, async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(paramsOf[algorithm], { minLength: 2, maxLength: 2 }),
          fc.array(fc.tuple(step, fc.boolean()), { minLength: 2, maxLength: 24 }),
          async (paramSets, steps) => {
            const clock = fixedClock(CLOCK);
            const mixedNs = uniqueNamespace();
            const aloneNs = uniqueNamespace();
            const versions = [
              new Limiter({ store: current, clock, namespace: mixedNs }),
              new Limiter({ store: previous, clock, namespace: mixedNs }),
            ];
            const alone = new Limiter({ store: previous, clock, namespace: aloneNs });
            let at = CLOCK - YEAR / 2;
            for (const [{ params, cost, dt }, onCurrent] of steps) {
              at = inRange(Math.max(CLOCK - YEAR, at + dt));
              const p = paramSets[params % 2] as Params;
              const request = { key: "k", algorithm, ...p, cost: costFor(cost, capacityOf(algorithm, p)), at };
              const limiter = versions[onCurrent ? 0 : 1] as Limiter;
              expect(await outcome(() => limiter.check(request)), JSON.stringify(request)).toEqual(
                await outcome(() => alone.check(request)),
              );
              expect(await stateOf(limitKey(mixedNs, algorithm, "k"), algorithm)).toEqual(
                await stateOf(limitKey(aloneNs, algorithm, "k"), algorithm),
              );
            }
          },
        ),
        { numRuns: 30 },
      );
    });
  }
});

describe("clocks at the ends of the number line (the epoch, 2^53 - 1, the last time a Date holds)", () => {
  /** Windows and periods of a minute or more: states dated at the epoch live at least that long (REPLAY_TTL_MS). */
  const longWindows = fc.oneof(fc.constantFrom(60_000, DAY, YEAR - 1, YEAR), fc.integer({ min: 60_000, max: YEAR }));
  const longParams: Record<Algorithm, fc.Arbitrary<Params>> = {
    "fixed-window": fc.record({ max: counts, windowMs: longWindows }),
    "sliding-window": fc.record({ max: counts, windowMs: longWindows }),
    "sliding-log": fc.record({ max: logMax, windowMs: longWindows }),
    "token-bucket": fc.record({ max: counts, refillAmount: counts, refillEveryMs: longWindows, strict: fc.boolean() }),
    // count 1: a tolerance of a period or more (a shorter one would let a state dated at the epoch expire
    // between the two sides' calls)
    gcra: fc.record({ burst: fc.oneof(fc.constant(0), counts), count: fc.constant(1), periodMs: longWindows }),
  };
  const clocks = [
    0,
    1,
    YEAR,
    8_640_000_000_000_000 - 1,
    8_640_000_000_000_000,
    Number.MAX_SAFE_INTEGER - FIVE_MINUTES,
    Number.MAX_SAFE_INTEGER,
  ];

  for (const algorithm of ALGORITHMS) {
    it(`${algorithm}: replies and states equal the previous scripts' with the clock and \`at\` at 0, near 8.64e15 and near 2^53`, async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom(...clocks),
          fc.array(longParams[algorithm], { minLength: 2, maxLength: 2 }),
          fc.array(
            fc.record({ params: fc.nat(1), cost: costShare, back: fc.integer({ min: -FIVE_MINUTES, max: YEAR }) }),
            { minLength: 1, maxLength: 10 },
          ),
          async (clockAt, paramSets, steps) => {
            const s = sides(clockAt);
            for (const { params, cost, back } of steps) {
              const p = paramSets[params] as Params;
              const at = Math.min(Number.MAX_SAFE_INTEGER, Math.max(0, clockAt - back));
              const request = { key: "k", algorithm, ...p, cost: costFor(cost, capacityOf(algorithm, p)), at };
              const mine = await outcome(() => s.current.check(request));
              expect(mine, JSON.stringify(request)).toEqual(await outcome(() => s.previous.check(request)));
              expect(await stateOf(limitKey(s.currentNs, algorithm, "k"), algorithm)).toEqual(
                await stateOf(limitKey(s.previousNs, algorithm, "k"), algorithm),
              );
            }
          },
        ),
        { numRuns: 40 },
      );
    });
  }
});

describe("the reply's times, as the contract words them (the scripts under review alone)", () => {
  /** A copy of a limit's state in a fresh namespace (same key text, so the same hash tag): a probe's own. */
  async function copyOf(namespace: string, algorithm: Algorithm): Promise<string> {
    const probeNs = uniqueNamespace();
    await cluster.copy(limitKey(namespace, algorithm, "k"), limitKey(probeNs, algorithm, "k"));
    return probeNs;
  }
  const probe = (namespace: string, at: number) => new Limiter({ store: current, clock: fixedClock(at), namespace });

  for (const algorithm of ALGORITHMS) {
    it(`${algorithm}: a denial's resetAt is not before now + retryAfterMs, the same request passes at now + retryAfterMs, and a peek at resetAt finds all capacity back`, async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(paramsOf[algorithm], { minLength: 2, maxLength: 2 }),
          fc.array(step, { minLength: 1, maxLength: 16 }),
          async (generated, steps) => {
            // a fixed window's windowMs change is the known gap below: one set of parameters there
            const paramSets = algorithm === "fixed-window" ? [generated[0], generated[0]] : generated;
            const s = sides();
            let at = CLOCK - YEAR / 2;
            for (const { params, cost, dt } of steps) {
              at = inRange(Math.max(CLOCK - YEAR, at + dt));
              const p = paramSets[params % 2] as Params;
              const request = { key: "k", algorithm, ...p, cost: costFor(cost, capacityOf(algorithm, p)), at };
              let result: Awaited<ReturnType<Limiter["check"]>>;
              try {
                result = await s.current.check(request);
              } catch {
                continue; // refused by validation (a GCRA combination out of bounds)
              }
              const label = JSON.stringify({ request, result });
              if (result.resetAt < 8_640_000_000_000_000 - YEAR) {
                // all capacity back at resetAt: a peek there answers as a peek on a fresh key
                const back = await probe(await copyOf(s.currentNs, algorithm), result.resetAt).check({
                  ...request,
                  cost: 0,
                  at: result.resetAt,
                });
                const fresh = await probe(uniqueNamespace(), result.resetAt).check({
                  ...request,
                  cost: 0,
                  at: result.resetAt,
                });
                expect(back.remaining, label).toBe(fresh.remaining);
              }
              if (result.allowed) continue;
              const retry = result.retryAfterMs as number;
              expect(retry, label).toBeGreaterThanOrEqual(1);
              // times past the last a Date holds are the known gap below
              if (at + retry < 8_640_000_000_000_000 - YEAR) {
                expect(result.resetAt, label).toBeGreaterThanOrEqual(at + retry);
                const again = await probe(await copyOf(s.currentNs, algorithm), at + retry).check({
                  ...request,
                  at: at + retry,
                });
                expect(again.allowed, label).toBe(true);
              }
            }
          },
        ),
        { numRuns: 80 },
      );
    });
  }

  // Contract (docs/api.md, POST /v1/limit): "a denial's retryAfterMs is when the same request could pass if
  // nothing else happened" and "resetAt is when the limit has all its capacity back". After windowMs grows
  // (2 -> 3 here), the stored window's count still counts until the first boundary of the new length at or
  // after its end (lua/fixed-window.lua, Change), so that boundary is the reset. The previous scripts
  // (c41fbf8) named the stored end instead: the same request was denied again there (a defect, fixed).
  it("fixed window after windowMs grows: the same request passes at now + retryAfterMs, and resetAt has all capacity back", async () => {
    const base = CLOCK - (CLOCK % 6) - 600;
    const s = sides();
    const check = (windowMs: number, cost: number, at: number) =>
      s.current.check({ key: "k", algorithm: "fixed-window", max: 1, windowMs, cost, at });
    expect(await check(2, 1, base + 1)).toMatchObject({ allowed: true, resetAt: base + 2 });
    const denied = await check(3, 1, base + 1);
    expect(denied).toMatchObject({ allowed: false, resetAt: base + 3, retryAfterMs: 2 });
    // still counted at the stored end, all back at the reset
    expect(await check(3, 0, base + 2)).toMatchObject({ remaining: 0, resetAt: base + 3 });
    expect(await check(3, 0, base + 3)).toMatchObject({ remaining: 1 });
    expect(await check(3, 1, base + 1 + (denied.retryAfterMs as number))).toMatchObject({ allowed: true });
    // a window that grows to a multiple keeps the stored end when it is a boundary of both (3 -> 6 at B+6)
    expect(await check(6, 0, base + 5)).toMatchObject({ resetAt: base + 6 });
  });

  // Contract (docs/api.md, POST /v1/limit): "resetAt is never before now + retryAfterMs". A token bucket of
  // 1e9 tokens refilled one a year, emptied and asked for all of them: resetAt is capped at the last time a
  // Date holds (8.64e15); retryAfterMs was capped at the same number of ms counted from now, so now +
  // retryAfterMs was past resetAt (and past any Date) in the previous scripts (a defect, fixed). It is
  // now capped so that now + retryAfterMs is that last time too.
  it("token bucket emptied for years: resetAt is not before now + retryAfterMs when both are capped", async () => {
    const s = sides();
    const request = {
      key: "k",
      algorithm: "token-bucket",
      max: MAX_COUNT,
      refillAmount: 1,
      refillEveryMs: YEAR,
      cost: MAX_COUNT,
      at: CLOCK,
    };
    await s.current.check(request);
    const denied = await s.current.check({ ...request, at: CLOCK + 1 });
    expect(denied.allowed).toBe(false);
    expect(denied.resetAt).toBe(8.64e15);
    expect(CLOCK + 1 + (denied.retryAfterMs as number)).toBe(8.64e15);
  });
});

describe("many calls in flight at once (packed arguments from a shared buffer pool, pipelined)", () => {
  it("300 concurrent checks of one limit per algorithm and 300 of one scope: exactly capacity allowed, each remaining given once", async () => {
    const s = sides();
    const specs: Record<Algorithm, Record<string, unknown>> = {
      "fixed-window": { max: 100, windowMs: YEAR },
      "sliding-window": { max: 100, windowMs: YEAR },
      "sliding-log": { max: 100, windowMs: YEAR },
      "token-bucket": { max: 100, refillAmount: 1, refillEveryMs: YEAR },
      gcra: { burst: 99, count: 1, periodMs: DAY },
    };
    const calls = ALGORITHMS.flatMap((algorithm) =>
      Array.from({ length: 300 }, (_, i) =>
        s.current
          .check({ key: `k:${algorithm}`, algorithm, ...specs[algorithm], at: CLOCK, cost: i % 3 === 0 ? 0 : 1 })
          .then((r) => ({ ...r, cost: i % 3 === 0 ? 0 : 1 })),
      ),
    );
    const scoped = Array.from({ length: 300 }, () =>
      s.current.checkAll({
        scope: "s|,:",
        at: CLOCK,
        limits: ALGORITHMS.map((algorithm) => ({ key: algorithm, algorithm, ...specs[algorithm] })),
      }),
    );
    const results = await Promise.all(calls);
    for (const algorithm of ALGORITHMS) {
      const charged = results.filter((r) => r.algorithm === algorithm && r.cost === 1);
      const allowed = charged.filter((r) => r.allowed);
      expect(allowed.length, algorithm).toBe(100);
      expect(
        allowed.map((r) => r.remaining).sort((a, b) => a - b),
        algorithm,
      ).toEqual(Array.from({ length: 100 }, (_, i) => i));
    }
    const many = await Promise.all(scoped);
    expect(many.filter((r) => r.allowed).length).toBe(100);
    for (const [i, algorithm] of ALGORITHMS.entries()) {
      expect(
        many
          .filter((r) => r.allowed)
          .map((r) => r.results[i]?.remaining)
          .sort((a, b) => (a as number) - (b as number)),
        algorithm,
      ).toEqual(Array.from({ length: 100 }, (_, k) => k));
    }
  });
});

describe("edges of what validation accepts", () => {
  const edgeRequests: Record<string, unknown>[] = [
    { algorithm: "fixed-window", max: MAX_COUNT, windowMs: YEAR, cost: MAX_COUNT },
    { algorithm: "fixed-window", max: 1, windowMs: 1, cost: 1 },
    { algorithm: "sliding-window", max: MAX_COUNT, windowMs: YEAR, cost: MAX_COUNT },
    { algorithm: "sliding-window", max: MAX_COUNT, windowMs: YEAR, cost: 1 },
    { algorithm: "sliding-window", max: 1, windowMs: 1, cost: 1 },
    { algorithm: "sliding-log", max: 100_000, windowMs: YEAR, cost: 100_000 },
    { algorithm: "sliding-log", max: 100_000, windowMs: YEAR, cost: 1 },
    { algorithm: "token-bucket", max: MAX_COUNT, refillAmount: 1, refillEveryMs: YEAR, cost: MAX_COUNT },
    { algorithm: "token-bucket", max: MAX_COUNT, refillAmount: 1, refillEveryMs: YEAR, strict: true, cost: 1 },
    { algorithm: "token-bucket", max: 1, refillAmount: MAX_COUNT, refillEveryMs: 1, cost: 1 },
    { algorithm: "gcra", burst: 0, count: 1, periodMs: YEAR, cost: 1 },
    { algorithm: "gcra", burst: MAX_COUNT - 1, count: MAX_COUNT, periodMs: YEAR, cost: MAX_COUNT },
    { algorithm: "gcra", burst: 3, count: 3_000_000, periodMs: 3000, cost: 4 },
    { algorithm: "gcra", burst: 7, count: 3, periodMs: 1000, cost: 2 },
  ];

  it("each limit at its largest and smallest parameters, charged its capacity then 1 (denied) then peeked, at the oldest and the latest `at` accepted: replies and states equal the previous scripts'", async () => {
    for (const edge of edgeRequests) {
      for (const at of [CLOCK - YEAR, CLOCK + FIVE_MINUTES]) {
        const s = sides();
        for (const cost of [edge.cost, 1, 0, 1]) {
          const request = { key: "k", ...edge, cost, at };
          const mine = await outcome(() => s.current.check(request));
          expect(mine, JSON.stringify(request)).toEqual(await outcome(() => s.previous.check(request)));
          const algorithm = edge.algorithm as Algorithm;
          expect(await stateOf(limitKey(s.currentNs, algorithm, "k"), algorithm)).toEqual(
            await stateOf(limitKey(s.previousNs, algorithm, "k"), algorithm),
          );
        }
      }
    }
  });

  it("a token bucket of 1e9 tokens refilled one a year, emptied: resetAt is capped at the last time a Date holds, and retryAfterMs is a year, as before", async () => {
    const s = sides();
    const request = {
      key: "k",
      algorithm: "token-bucket",
      max: MAX_COUNT,
      refillAmount: 1,
      refillEveryMs: YEAR,
      cost: MAX_COUNT,
      at: CLOCK,
    };
    const charged = await s.current.check(request);
    expect(charged).toMatchObject({ allowed: true, remaining: 0, resetAt: 8_640_000_000_000_000 });
    const denied = await s.current.check({ ...request, cost: 1 });
    expect(denied).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: YEAR });
    expect(Number.isInteger(denied.resetAt) && Number.isInteger(denied.retryAfterMs)).toBe(true);
  });

  it("refuses what validation refuses, as the previous code did: 1e21, 0.1 + 0.2, 2^53 ± 1, -0 cost, exponent forms, `at` a ms past either bound", async () => {
    const s = sides();
    const requests: Record<string, unknown>[] = [
      { algorithm: "fixed-window", max: 1e21, windowMs: 1000 },
      { algorithm: "fixed-window", max: 0.1 + 0.2, windowMs: 1000 },
      { algorithm: "fixed-window", max: 2 ** 53 + 1, windowMs: 1000 },
      { algorithm: "fixed-window", max: 2 ** 53 - 1, windowMs: 1000 },
      { algorithm: "sliding-window", max: 10, windowMs: 1e21 },
      { algorithm: "sliding-log", max: 100_001, windowMs: 1000 },
      { algorithm: "token-bucket", max: 5, refillAmount: 1, refillEveryMs: YEAR + 1 },
      { algorithm: "gcra", burst: 1, count: 1001, periodMs: 1 },
      { algorithm: "gcra", burst: MAX_COUNT, count: 1, periodMs: YEAR },
      { algorithm: "fixed-window", max: 5, windowMs: 1000, cost: 6 },
      { algorithm: "fixed-window", max: 5, windowMs: 1000, cost: 1.5 },
      { algorithm: "fixed-window", max: 5, windowMs: 1000, at: CLOCK + FIVE_MINUTES + 1 },
      { algorithm: "fixed-window", max: 5, windowMs: 1000, at: CLOCK - YEAR - 1 },
      { algorithm: "fixed-window", max: 5, windowMs: 1000, at: 1.7953236e12 + 0.5 },
    ];
    for (const request of requests) {
      const mine = await outcome(() => s.current.check({ key: "k", ...request }));
      expect(mine, JSON.stringify(request)).toEqual(await outcome(() => s.previous.check({ key: "k", ...request })));
      expect(mine).toMatchObject({ error: "ValidationError" });
    }
    expect(await cluster.exists(limitKey(s.currentNs, "fixed-window", "k"))).toBe(0);
  });

  it("cost -0 (what JSON.parse makes of -0) peeks like cost 0 on both paths: nothing is stored", async () => {
    const s = sides();
    const one = { key: "k", algorithm: "sliding-log", max: 3, windowMs: 1000, cost: -0, at: CLOCK };
    expect(await outcome(() => s.current.check(one))).toEqual(await outcome(() => s.previous.check(one)));
    const many = {
      scope: "s",
      at: CLOCK,
      cost: -0,
      limits: [{ key: "k", algorithm: "token-bucket", max: 3, refillAmount: 1, refillEveryMs: 1000, strict: true }],
    };
    expect(await outcome(() => s.current.checkAll(many))).toEqual(await outcome(() => s.previous.checkAll(many)));
    expect(await cluster.exists(limitKey(s.currentNs, "sliding-log", "k"))).toBe(0);
    expect(await cluster.exists(scopedLimitKey(s.currentNs, "s", "token-bucket", "k"))).toBe(0);
  });

  it("lifetimes are never shorter than the previous scripts': a charge dated back lives its span in its own timeline", async () => {
    const clock = serverClockNow();
    const s = sides(clock);
    // the previous scripts counted from the server's clock alone: by it the window ended a year ago (the 60 s floor)
    const request = { key: "k", algorithm: "sliding-log", max: 3, windowMs: 2 * DAY, at: clock - YEAR + DAY };
    await s.previous.check(request);
    await s.current.check(request);
    const mine = await cluster.pttl(limitKey(s.currentNs, "sliding-log", "k"));
    const theirs = await cluster.pttl(limitKey(s.previousNs, "sliding-log", "k"));
    expect(theirs).toBeLessThanOrEqual(60_000);
    expect(mine).toBeGreaterThan(2 * DAY - 60_000);
  });
});

/** The primary serving `key`'s slot. */
function primaryOf(key: string): Redis {
  const address = (cluster.slots[calculateSlot(key)] ?? [])[0];
  const node = cluster.nodes("master").find((n) => `${n.options.host}:${n.options.port}` === address);
  if (!node) throw new Error(`no primary for ${key}`);
  return node;
}

async function pastMaxmemory<T>(node: Redis, run: () => Promise<T>): Promise<T> {
  const [, before] = (await node.config("GET", "maxmemory")) as [string, string];
  try {
    await node.config("SET", "maxmemory", "1");
    return await run();
  } finally {
    await node.config("SET", "maxmemory", before);
  }
}

describe("peeks on a node past maxmemory (the readers, and their EVAL form where the library is missing)", () => {
  afterAll(async () => {
    await loadLibrary(cluster, limitLibrary);
    await loadLibrary(cluster, tollgateLibrary);
  });

  const specs: Record<Algorithm, Record<string, unknown>> = {
    "fixed-window": { max: 5, windowMs: 60_000 },
    "sliding-window": { max: 5, windowMs: 60_000 },
    "sliding-log": { max: 5, windowMs: 60_000 },
    "token-bucket": { max: 5, refillAmount: 1, refillEveryMs: 60_000, strict: true },
    gcra: { burst: 4, count: 1, periodMs: 60_000 },
  };

  for (const flushed of [false, true]) {
    it(`every algorithm's peek (POST /v1/limit and /v1/limits, cost 0) answers as before the node filled${flushed ? ", on a node that lost the library" : ""}`, async () => {
      for (const algorithm of ALGORITHMS) {
        const s = sides();
        const one = { key: "k", algorithm, ...specs[algorithm], at: CLOCK };
        const many = { scope: "s", at: CLOCK, limits: [{ key: "k", algorithm, ...specs[algorithm] }] };
        await s.current.check({ ...one, cost: 2 });
        await s.current.checkAll({ ...many, cost: 2 });
        const peekOne = await s.current.check({ ...one, cost: 0 });
        const peekMany = await s.current.checkAll({ ...many, cost: 0 });
        const node = primaryOf(limitKey(s.currentNs, algorithm, "k"));
        const scopeNode = primaryOf(scopedLimitKey(s.currentNs, "s", algorithm, "k"));
        if (flushed) {
          await node.function("FLUSH");
          await scopeNode.function("FLUSH");
        }
        expect(await pastMaxmemory(node, () => outcome(() => s.current.check({ ...one, cost: 0 }))), algorithm).toEqual(
          {
            ok: JSON.parse(JSON.stringify(peekOne)),
          },
        );
        expect(
          await pastMaxmemory(scopeNode, () => outcome(() => s.current.checkAll({ ...many, cost: 0 }))),
          algorithm,
        ).toEqual({ ok: JSON.parse(JSON.stringify(peekMany)) });
        await loadLibrary(cluster, limitLibrary);
      }
    });
  }
});
