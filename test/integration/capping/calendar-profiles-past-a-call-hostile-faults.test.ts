// Faults while a batch past 256 calendar profiles is decided in parts (decision 0200): what was counted is
// reported once (PartlyDecidedError), a peek sees the fault itself, and the consumer forwards each send.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import type { CampaignBatchInput } from "../../../functions/core/capping/campaign-batch.ts";
import { CampaignConsumer } from "../../../functions/core/capping/campaign-consumer.ts";
import type { CapStore } from "../../../functions/core/capping/cap-sends-script.ts";
import type { CapBatchResult } from "../../../functions/core/capping/decisions.ts";
import type { Deferral } from "../../../functions/core/capping/deferral.ts";
import type { DeliveryMessage } from "../../../functions/core/capping/delivery.ts";
import {
  PartlyDecidedError,
  StoreLostError,
  StoreUnavailableError,
  ValidationError,
} from "../../../functions/core/shared/errors.ts";
import { capIdentityKey, capTagOf } from "../../../sdk/src/protocol/keys.ts";
import {
  AT,
  SEGMENTS,
  type Shape,
  segmentOfUser,
  shuffled,
  stacks as stacksOn,
  USERS,
  userIds,
  zoneOfUser,
  zones,
} from "../../support/calendar-profiles-parts.ts";
import { connectCluster } from "../../support/cluster.ts";
import { HOUR } from "../../support/rules.ts";

let cluster: TollgateCluster;
let redis: RedisCapStore;
beforeAll(() => {
  cluster = connectCluster();
  redis = new RedisCapStore(cluster);
});
afterAll(async () => {
  await cluster.quit();
});

const stacks = (shape: Shape, store?: CapStore) => stacksOn(redis, shape, store);

const kindsOf = (result: CapBatchResult) => result.decisions.map((d) => d.decision);

/** Decides `batch` whole and apart at `now`: both results, held to each other in full. */
async function _both(stack: ReturnType<typeof stacks>, batch: CampaignBatchInput & { userIds: number[] }, now: number) {
  stack.clock.set(now);
  const whole = await stack.gate.capBatch(batch);
  const apart = await stack.apart(batch);
  expect(whole.decisions).toEqual(apart.decisions);
  expect(whole.totals).toEqual(apart.totals);
  expect(whole.held).toEqual(apart.held);
  return { whole, apart };
}

/** Segment 7 in the last zone: the batch's highest segment and zone pair, so in its last part. */
const LAST = SEGMENTS * (zones.length - 1) + SEGMENTS - 1;

describe("a batch past 256 calendar profiles, a fault in a later part", () => {
  /** A store that fails calls `shouldFail` picks (`lost`: after running them). */
  function faulty(shouldFail: (call: number, args: readonly (string | Buffer)[]) => boolean, lost = false) {
    let calls = 0;
    const log: { call: number; mode: string; failed: boolean }[] = [];
    const store: CapStore = {
      async capSends(keys, args) {
        const call = ++calls;
        const fail = shouldFail(call, args);
        log.push({ call, mode: String(args[2]), failed: fail });
        if (!fail) return redis.capSends(keys, args);
        if (lost) {
          await redis.capSends(keys, args);
          throw new StoreUnavailableError("injected: reply lost", { mayHaveRun: true });
        }
        throw new StoreUnavailableError("injected: not run", { mayHaveRun: false });
      },
    };
    return { store, log };
  }

  async function partly(promise: Promise<unknown>): Promise<PartlyDecidedError<CapBatchResult>> {
    const error = await promise.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(PartlyDecidedError);
    return error as PartlyDecidedError<CapBatchResult>;
  }

  /**
   * With defer and a capped user in the first part, the calls run: the first part's counts, its deferral
   * peeks, the second part's counts, its peeks. A count after a peek is the second part's.
   */
  function phases() {
    let peeked = false;
    let countedAfterPeek = false;
    return {
      secondCount: (_call: number, args: readonly (string | Buffer)[]) => {
        const peek = String(args[2]).startsWith("peek");
        if (peek) peeked = true;
        return !peek && peeked;
      },
      secondPeek: (_call: number, args: readonly (string | Buffer)[]) => {
        const peek = String(args[2]).startsWith("peek");
        if (!peek && peeked) countedAfterPeek = true;
        if (peek) peeked = true;
        return peek && countedAfterPeek;
      },
    };
  }

  /** Users 0 (the first part) and LAST (the second) already sent once: capped by the day. */
  async function primed(shouldFail: (call: number, args: readonly (string | Buffer)[]) => boolean, lost = false) {
    let armed = false;
    const { store, log } = faulty((call, args) => armed && shouldFail(call, args), lost);
    const stack = stacks({}, store);
    stack.clock.set(AT);
    await stack.gate.capBatch({ campaignId: "pre", channel: "push", userIds: [0, LAST], at: AT });
    armed = true;
    return { stack, log };
  }

  for (const lost of [false, true]) {
    it(`a fault in the second part's count reports what the first part counted, once each (${lost ? "reply lost" : "not run"})`, async () => {
      const { stack, log } = await primed(phases().secondCount, lost);
      const input = shuffled(userIds);
      const batch = { campaignId: "f0", channel: "push", userIds: input, at: AT, defer: { maxMs: 30 * HOUR } };
      const error = await partly(stack.gate.capBatch(batch));
      expect(log.filter((l) => l.failed).length).toBeGreaterThan(0);
      const decided = error.decided.decisions;
      const ids = decided.map((d) => d.userId);
      expect(new Set(ids).size).toBe(ids.length);
      // the first part whole (a numbering's worth of pairs, two users each), user 0 deferred, LAST not reported
      expect(ids.length).toBeGreaterThanOrEqual(512);
      expect(ids.length).toBeLessThan(USERS);
      expect(ids).toContain(0);
      expect(ids).not.toContain(LAST);
      expect(decided.find((d) => d.userId === 0)?.decision).toBe("deferred");
      const allowedInTotals = Object.values(error.decided.totals).reduce((n, t) => n + t.allowed, 0);
      expect(allowedInTotals).toBe(ids.length - 1);
      expect(error.decided.held?.deferred.flatMap((g) => g.userIds)).toEqual([0]);
      // the retry on a sound store: the reported allowed ones are duplicates, the others decided afresh
      const retry = await stack.make(stack.namespace, redis).capBatch(batch);
      const reported = new Set(ids);
      for (const d of retry.decisions) {
        if (d.userId === 0 || d.userId === LAST) expect(d.decision).toBe("deferred");
        else if (reported.has(d.userId)) expect(d.decision, `user ${d.userId}`).toBe("duplicate");
        else expect(d.decision, `user ${d.userId}`).toBe(lost ? "duplicate" : "allowed");
      }
      // counted once each: a second campaign finds every user capped
      const next = await stack.make(stack.namespace, redis).capBatch({ ...batch, campaignId: "f1", at: AT + 1 });
      expect(new Set(kindsOf(next))).toEqual(new Set(["deferred"]));
      expect(next.totals.s0?.deferredBy).toEqual({ "push:day": USERS / SEGMENTS });
    });
  }

  it("a fault in the second part's deferral peek reports every send both parts decided, none twice", async () => {
    const { stack, log } = await primed(phases().secondPeek);
    const batch = { campaignId: "g0", channel: "push", userIds, at: AT, defer: { maxMs: 30 * HOUR } };
    const error = await partly(stack.gate.capBatch(batch));
    expect(log.filter((l) => l.failed).length).toBeGreaterThan(0);
    const decided = error.decided.decisions;
    const ids = decided.map((d) => d.userId);
    expect(new Set(ids).size).toBe(ids.length);
    // both parts counted before the failing peek: every user is reported, all but 0 and LAST allowed
    expect([...ids].sort((a, b) => a - b)).toEqual(userIds);
    const notAllowed = decided.filter((d) => d.decision !== "allowed").map((d) => `${d.userId}:${d.decision}`);
    expect(notAllowed.sort()).toEqual(["0:deferred", `${LAST}:capped`]);
    const retry = await stack.make(stack.namespace, redis).capBatch(batch);
    for (const d of retry.decisions) {
      expect(d.decision, `user ${d.userId}`).toBe(d.userId === 0 || d.userId === LAST ? "deferred" : "duplicate");
    }
  });

  it("a peek of such a batch whose second part fails sees the fault itself, nothing partly decided", async () => {
    let calls = 0;
    const { store } = faulty(() => ++calls > 3);
    const stack = stacks({}, store);
    stack.clock.set(AT);
    const batch = { campaignId: "h0", channel: "push", userIds, at: AT };
    const error = await stack.gate.peek(batch).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(StoreUnavailableError);
    const eligible = await stack.gate.peekEligible(batch).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(eligible).toBeInstanceOf(StoreUnavailableError);
  });

  it("a fault on every call of the first part counts nothing and says so (not partly decided)", async () => {
    const { store } = faulty(() => true);
    const stack = stacks({}, store);
    stack.clock.set(AT);
    const batch = { campaignId: "i0", channel: "push", userIds: shuffled(userIds), at: AT };
    const error = await stack.gate.capBatch(batch).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(StoreUnavailableError);
    const retry = await stack.make(stack.namespace, redis).capBatch(batch);
    expect(new Set(kindsOf(retry))).toEqual(new Set(["allowed"]));
  });

  it("beforeCount sees the whole batch once, and its refusal counts nothing", async () => {
    const stack = stacks({});
    stack.clock.set(AT);
    const input = shuffled([...userIds, 5, 5]);
    const seen: number[] = [];
    const batch = { campaignId: "b0", channel: "push", userIds: input, at: AT };
    await stack.gate.capBatch(batch, { beforeCount: (_b, sends) => seen.push(sends.userIds.length) });
    expect(seen).toEqual([input.length]);
    const refuse = () => {
      throw new ValidationError("userIds", "refused");
    };
    await expect(stack.gate.capBatch({ ...batch, campaignId: "b1" }, { beforeCount: refuse })).rejects.toBeInstanceOf(
      ValidationError,
    );
    const after = await stack.gate.capBatch({ ...batch, campaignId: "b1", at: AT + 1 });
    expect(new Set(kindsOf(after))).toEqual(new Set(["capped"]));
  });

  it("the consumer forwards what the first part counted, then on the retry every send once by its id, deferring once", async () => {
    let fail = true;
    const phase = phases().secondCount;
    const { store } = faulty((call, args) => fail && phase(call, args));
    const stack = stacks({}, store);
    stack.clock.set(AT);
    await stack.gate.capBatch({ campaignId: "pre", channel: "push", userIds: [0, LAST], at: AT });
    const sent: DeliveryMessage[] = [];
    const scheduled: Deferral[] = [];
    const consumer = new CampaignConsumer({
      capper: stack.gate,
      delivery: { maxBodyBytes: () => 256 * 1024, send: async (m) => void sent.push(...m) },
      deadLetters: { send: async () => {} },
      sendsPerMessage: 100,
      deferrals: { schedule: async (d) => void scheduled.push(...d) },
    });
    const body = JSON.stringify({
      campaignId: "m0",
      channel: "push",
      userIds: shuffled(userIds),
      at: AT,
      defer: { maxMs: 30 * HOUR },
    });
    await expect(consumer.consume(body, "msg-1", AT)).rejects.toBeInstanceOf(StoreUnavailableError);
    const first = sent.flatMap((m) => m.sends);
    // the first part's allowed sends: all of it but user 0 (capped, deferred)
    expect(first.length).toBeGreaterThanOrEqual(511);
    expect(first.length).toBeLessThan(USERS - 2);
    expect(scheduled).toEqual([]);
    fail = false;
    const outcome = await consumer.consume(body, "msg-1", AT);
    expect(outcome.kind).toBe("forwarded");
    const all = sent.flatMap((m) => m.sends);
    const byId = new Map(all.map((s) => [s.dedupeId, s.userId]));
    // every user but the two capped forwarded, the first part's twice under the same id
    expect([...new Set(byId.values())].sort((a, b) => a - b)).toEqual(userIds.filter((u) => u !== 0 && u !== LAST));
    expect(byId.size).toBe(USERS - 2);
    const deferredUsers = scheduled.flatMap((d) => (JSON.parse(d.body) as { userIds: number[] }).userIds);
    expect(deferredUsers.sort((a, b) => a - b)).toEqual([0, LAST]);
  });

  for (const lost of [false, true]) {
    it(`a fault in the second call reports what the calls before it decided, and nothing of the last part (${lost ? "reply lost" : "not run"})`, async () => {
      let calls = 0;
      const { store } = faulty(() => ++calls === 2, lost);
      const stack = stacks({}, store);
      stack.clock.set(AT);
      const batch = { campaignId: "j0", channel: "push", userIds: shuffled(userIds), at: AT };
      const error = await partly(stack.gate.capBatch(batch));
      const ids = error.decided.decisions.map((d) => d.userId);
      expect(new Set(ids).size).toBe(ids.length);
      expect(ids.length).toBeGreaterThan(0);
      // the last part (LAST's) never answered
      expect(ids).not.toContain(LAST);
      const reported = new Set(ids);
      const retry = await stack.make(stack.namespace, redis).capBatch(batch);
      for (const d of retry.decisions) {
        if (reported.has(d.userId)) expect(d.decision, `user ${d.userId}`).toBe("duplicate");
      }
      // a call that did not run counted nothing, and no call after it started
      if (!lost) expect(retry.decisions.find((d) => d.userId === LAST)?.decision).toBe("allowed");
      const next = await stack.make(stack.namespace, redis).capBatch({ ...batch, campaignId: "j1", at: AT + 1 });
      expect(new Set(kindsOf(next))).toEqual(new Set(["capped"]));
    });
  }
});

describe("a batch past 256 calendar profiles touching a slot known lost (onStoreLoss pause)", () => {
  // each user in a cap tag of its own; the lost one has the last segment and zone pair: the second part's
  const ids = userIds.map((u) => u * 1024 + (u % 1024));
  const pairOf = (id: number) => segmentOfUser(id) * (zones.length + 1) + zoneOfUser(id);
  const lostUser = ids.reduce((a, b) => (pairOf(b) > pairOf(a) ? b : a));
  const cases: [string, number[]][] = [
    ["its segment alone, no parts", ids.filter((id) => segmentOfUser(id) === segmentOfUser(lostUser))],
    ["whole, in parts", ids],
  ];
  for (const [name, batchIds] of cases) {
    // regression (in parts): the stillLost check ran per part, so the first part counted before the second failed
    it(`fails before any of its sends is counted (${name})`, async () => {
      let lostKey = "";
      const store: CapStore = {
        capSends: (keys, args) => redis.capSends(keys, args),
        stillLost: async (keys) =>
          new Map(keys.filter((key) => key === lostKey).map((key) => [key, new StoreLostError(`${key}:epoch`, 1)])),
      };
      const stack = stacks({ ids }, store);
      lostKey = capIdentityKey(stack.namespace, capTagOf(lostUser));
      stack.clock.set(AT);
      const batch = { campaignId: "l0", channel: "push", userIds: shuffled(batchIds), at: AT };
      const error = await stack.gate.capBatch(batch).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(StoreLostError);
      // nothing counted: the same campaign on a sound store allows every user
      const retry = await stack.make(stack.namespace, redis).capBatch(batch);
      expect(new Set(kindsOf(retry))).toEqual(new Set(["allowed"]));
    });
  }
});
