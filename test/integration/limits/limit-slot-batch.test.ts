// POST /v1/limit checks of one hash slot sharing a script call (RedisLimitStore's slotBatch, lua/limit-batch.lua),
// on the real cluster: concurrent checks answered exactly as the reference models answer them one after
// another in arrival order, fewer FCALLs than checks (INFO commandstats of the slot's primary), a lone
// check sent alone, a check Redis refuses failing alone, and a call's failure each check's, classified alike.
import fc from "fast-check";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisLimitStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import type { LimitResult } from "../../../functions/core/limits/limit-specs.ts";
import { Limiter } from "../../../functions/core/limits/limiter.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { StoreReplyError, StoreUnavailableError } from "../../../functions/core/shared/errors.ts";
import { hashSlotOf, limitKey } from "../../../sdk/src/protocol/index.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
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

const DAY = 86_400_000;
/** A midnight UTC a day or two ahead: every state written lives through a test. */
const T = Math.ceil((Date.now() + DAY) / DAY) * DAY;

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

const batchedLimiter = (namespace: string, maxPerCall = 64, deadlineMs = 2_000, client = cluster) =>
  new Limiter({
    store: new RedisLimitStore(client, { deadlineMs, slotBatch: { maxPerCall } }),
    clock: fixedClock(T),
    namespace,
  });

/** The primary serving `key`'s slot (through the cluster's own routing table). */
function primaryOf(key: string): Redis {
  const slot = hashSlotOf(key);
  const owners = (cluster as unknown as { slots: string[][] }).slots[slot] as string[];
  const node = cluster.nodes("master").find((n) => `${n.options.host}:${n.options.port}` === owners[0]);
  if (!node) throw new Error(`no primary for slot ${slot}`);
  return node;
}

/** Calls of FCALL and FCALL_RO the node has run (INFO commandstats). */
async function fcalls(node: Redis): Promise<number> {
  const info = await node.info("commandstats");
  let calls = 0;
  for (const match of info.matchAll(/^cmdstat_fcall(?:_ro)?:calls=(\d+)/gm)) calls += Number(match[1]);
  return calls;
}

/** The fields a model states, from the limiter's result (retryAfterMs is 0 when allowed, as the model's). */
const asModel = (result: LimitResult): ModelReply => ({
  allowed: result.allowed,
  limit: result.limit,
  remaining: result.remaining,
  resetAt: result.resetAt,
  retryAfterMs: result.retryAfterMs ?? 0,
});

describe("checks of one slot in flight together", () => {
  it("60 concurrent checks on one key with max 25: exactly 25 allowed, each answer the serial model's, in fewer FCALLs", async () => {
    await batchedLimiter(uniqueNamespace()).check({ key: "warm", algorithm: "fixed-window", max: 1, windowMs: DAY });
    const namespace = uniqueNamespace();
    const limiter = batchedLimiter(namespace);
    const request = { key: "one", algorithm: "fixed-window", max: 25, windowMs: DAY, at: T + 1_000 } as const;
    const node = primaryOf(limitKey(namespace, "fixed-window", "one"));
    const before = await fcalls(node);
    const replies = await Promise.all(Array.from({ length: 60 }, () => limiter.check(request)));
    const calls = (await fcalls(node)) - before;
    const model = new FixedWindowModel();
    const serial = replies.map(() => checkOne(model, request.at, 1, request));
    expect(replies.map(asModel)).toEqual(serial);
    expect(replies.filter((r) => r.allowed)).toHaveLength(25);
    // made in one turn of the event loop, the 60 go together, at most 64 a call: one FCALL (other tests
    // may add calls, never remove them)
    expect(calls).toBeGreaterThanOrEqual(1);
    expect(calls).toBeLessThan(60);
  });

  it("answers random concurrent checks of five algorithms on one key's slot as the models do in arrival order", async () => {
    const params = fc.record({
      // at least the largest cost: a cost over the capacity is a validation error, not a decision
      max: fc.integer({ min: 3, max: 6 }),
      windowMs: fc.integer({ min: 1_000, max: 60_000 }),
      refillEveryMs: fc.integer({ min: 100, max: 10_000 }),
      burst: fc.integer({ min: 2, max: 5 }),
    });
    const check = fc.record({
      algorithm: fc.constantFrom("fixed-window", "sliding-window", "sliding-log", "token-bucket", "gcra"),
      offset: fc.integer({ min: 0, max: 5_000 }),
      cost: fc.oneof(
        { weight: 4, arbitrary: fc.constant(1) },
        { weight: 1, arbitrary: fc.integer({ min: 0, max: 3 }) },
      ),
    });
    await fc.assert(
      fc.asyncProperty(params, fc.array(check, { minLength: 2, maxLength: 40 }), async (p, checks) => {
        const namespace = uniqueNamespace();
        // a small cap: several joined calls in a row, not one
        const limiter = batchedLimiter(namespace, 7);
        const models: Record<string, LimitModel<never>> = {
          "fixed-window": new FixedWindowModel() as LimitModel<never>,
          "sliding-window": new SlidingWindowModel() as LimitModel<never>,
          "sliding-log": new SlidingLogModel() as LimitModel<never>,
          "token-bucket": new TokenBucketModel() as LimitModel<never>,
          gcra: new GcraModel() as LimitModel<never>,
        };
        const specOf = (algorithm: string) => {
          switch (algorithm) {
            case "token-bucket":
              return { max: p.max, refillAmount: 1, refillEveryMs: p.refillEveryMs, strict: false };
            case "gcra":
              return { burst: p.burst, count: 1, periodMs: p.refillEveryMs };
            default:
              return { max: p.max, windowMs: p.windowMs };
          }
        };
        // every algorithm's key of "k" has the tag {k}: one slot, so all of them are joined
        const replies = await Promise.all(
          checks.map(({ algorithm, offset, cost }) =>
            limiter.check({ key: "k", algorithm, cost, at: T + offset, ...specOf(algorithm) }),
          ),
        );
        const serial = checks.map(({ algorithm, offset, cost }) =>
          checkOne(models[algorithm] as LimitModel<never>, T + offset, cost, specOf(algorithm) as never),
        );
        expect(replies.map(asModel)).toEqual(serial);
      }),
      { numRuns: 40 },
    );
  });

  it("sends a lone check as the algorithm's own function, one FCALL", async () => {
    const namespace = uniqueNamespace();
    const limiter = batchedLimiter(namespace);
    const node = primaryOf(limitKey(namespace, "gcra", "alone"));
    const before = await fcalls(node);
    const reply = await limiter.check({ key: "alone", algorithm: "gcra", burst: 1, count: 1, periodMs: 1_000 });
    expect(reply).toMatchObject({ allowed: true, limit: 2, remaining: 1 });
    expect((await fcalls(node)) - before).toBeGreaterThanOrEqual(1);
  });

  it("fails a check whose key Redis refuses (WRONGTYPE) alone: the checks before and after it are answered", async () => {
    const namespace = uniqueNamespace();
    const limiter = batchedLimiter(namespace);
    const bad = limitKey(namespace, "fixed-window", "typed");
    // a state key holding a hash: the script's GET on it is refused
    await cluster.hset(bad, "field", "value");
    const good = { key: "typed", algorithm: "sliding-log", max: 2, windowMs: DAY, at: T } as const;
    const refused = { key: "typed", algorithm: "fixed-window", max: 2, windowMs: DAY, at: T } as const;
    const settled = await Promise.allSettled([
      limiter.check(good),
      limiter.check(good),
      limiter.check(refused),
      limiter.check(good),
    ]);
    expect(settled.map((s) => s.status)).toEqual(["fulfilled", "fulfilled", "rejected", "fulfilled"]);
    const values = settled.map((s) => (s.status === "fulfilled" ? s.value.allowed : undefined));
    // as serially: the first two take the sliding log's 2, the fourth is denied
    expect(values).toEqual([true, true, undefined, false]);
    const error = (settled[2] as PromiseRejectedResult).reason;
    expect(error).toBeInstanceOf(StoreReplyError);
    expect((error as StoreReplyError).code).toBe("WRONGTYPE");
  });

  it("rejects every check of a call Redis did not answer with 'did not answer' (maybe counted), none as a reply error", async () => {
    const namespace = uniqueNamespace();
    // a client of its own: the timeouts open its circuit breaker, not the one the other tests share
    const own = connectCluster();
    const limiter = batchedLimiter(namespace, 64, 150, own);
    const request = { key: "paused", algorithm: "fixed-window", max: 100, windowMs: DAY, at: T } as const;
    const node = primaryOf(limitKey(namespace, "fixed-window", "paused"));
    await limiter.check(request);
    // the slot's primary holds every client's commands for a while: the first call and the joined one time out
    await node.call("CLIENT", "PAUSE", "600", "ALL");
    try {
      const settled = await Promise.allSettled(Array.from({ length: 5 }, () => limiter.check(request)));
      for (const s of settled) {
        expect(s.status).toBe("rejected");
        const reason = (s as PromiseRejectedResult).reason as StoreUnavailableError;
        expect(reason).toBeInstanceOf(StoreUnavailableError);
        expect(reason.mayHaveRun).toBe(true);
      }
    } finally {
      await node.call("CLIENT", "UNPAUSE");
      await own.quit();
    }
  });

  it("rejects every check of a call Redis answered with an error as that error (OOM past maxmemory)", async () => {
    const namespace = uniqueNamespace();
    const limiter = batchedLimiter(namespace);
    const request = { key: "full", algorithm: "token-bucket", max: 9, refillAmount: 1, refillEveryMs: 1_000 } as const;
    const node = primaryOf(limitKey(namespace, "token-bucket", "full"));
    await limiter.check(request);
    const [, maxmemory] = (await node.config("GET", "maxmemory")) as [string, string];
    const [, policy] = (await node.config("GET", "maxmemory-policy")) as [string, string];
    await node.config("SET", "maxmemory-policy", "noeviction");
    await node.config("SET", "maxmemory", "1");
    try {
      const settled = await Promise.allSettled(Array.from({ length: 4 }, () => limiter.check(request)));
      const codes = settled.map((s) =>
        s.status === "rejected" && s.reason instanceof StoreReplyError ? s.reason.code : s.status,
      );
      expect(codes).toEqual(["OOM", "OOM", "OOM", "OOM"]);
    } finally {
      await node.config("SET", "maxmemory", maxmemory);
      await node.config("SET", "maxmemory-policy", policy);
    }
  });
});
