// Priority headroom on the real cluster: caps that keep slots for higher priorities, against a reference
// model written from the contract (test/support/priority-model.ts), with sends stamped ahead and behind the
// clock, on the page-block path (16+ users of a page in a call), the record path and /v1/frequency checks.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import type { CapDecision } from "../../../functions/core/capping/decisions.ts";
import type { PriorityName } from "../../../functions/core/capping/priority.ts";
import { fixedClock, MAX_FUTURE_MS } from "../../../functions/core/shared/clock.ts";
import { parseDuration } from "../../../functions/core/shared/duration.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import {
  type ModelCap,
  modelReserved,
  type PriorityDecision,
  PriorityModel,
  type PrioritySend,
  priorityOf,
} from "../../support/priority-model.ts";
import { rulesOf, T0 } from "../../support/rules.ts";

const MINUTE = 60_000;

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

/** A policy of push caps for everyone (the default segment). */
const policyOf = (caps: ModelCap[]) => ({
  version: "priority.1",
  channels: ["push", "email"],
  segments: [],
  default: { name: "everyone", caps: { push: caps } },
});

function stack(caps: ModelCap[]) {
  const rules = rulesOf(policyOf(caps));
  const clock = fixedClock(T0);
  const capper = new Capper({
    store: new RedisCapStore(cluster),
    rules: () => rules,
    clock,
    namespace: uniqueNamespace(),
  });
  return { capper, clock, caps: rules.policy.capsFor(rules.policy.defaultSegment, "push") };
}

/** The engine's decision in the model's terms (the cap by its position among the segment's push caps). */
function asModel(decision: CapDecision, caps: readonly unknown[]): PriorityDecision {
  if (decision.decision === "capped") return { capped: caps.indexOf(decision.cap) };
  if (decision.decision === "displaced") return { displaced: caps.indexOf(decision.cap) };
  return decision.decision as PriorityDecision;
}

const priorityArb = fc.oneof(
  fc.constantFrom<PriorityName | undefined>(undefined, "promotional", "triggered", "transactional"),
  fc.integer({ min: 0, max: 100 }),
);
const reserveKeyArb = fc.constantFrom("triggered", "transactional", "20", "75", "100");
const capArb: fc.Arbitrary<ModelCap> = fc
  .record({
    window: fc.constantFrom("10m", "30m", "1h"),
    max: fc.integer({ min: 1, max: 5 }),
    reserve: fc.dictionary(reserveKeyArb, fc.integer({ min: 1, max: 3 }), { maxKeys: 3 }),
  })
  .map(({ window, max, reserve }) => {
    // "100" and "transactional" are one priority: keep one; then trim until fewer than max are reserved
    if ("100" in reserve && "transactional" in reserve) delete reserve["100"];
    const kept: Record<string, number> = {};
    let total = 0;
    for (const [key, slots] of Object.entries(reserve)) {
      if (total + slots >= max) continue;
      kept[key] = slots;
      total += slots;
    }
    return Object.keys(kept).length > 0 ? { window, max, reserve: kept } : { window, max };
  });

/** One step: a batch of users (or one /v1/frequency check), at a time skewed from the clock. */
const stepArb = fc.record({
  advanceMs: fc.integer({ min: 0, max: 8 * MINUTE }),
  // up to 5 minutes ahead (clock skew) and 9 minutes behind (a backfill the shortest window allows)
  skewMs: fc.integer({ min: -9 * MINUTE, max: MAX_FUTURE_MS - 1 }),
  priority: priorityArb,
  campaign: fc.constantFrom("", "reset", "order", "blast"),
  exempt: fc.constantFrom(false, false, false, false, true),
  countExempt: fc.boolean(),
  // users 0..39 share a page (16 or more in one call take its block); 7,000,000 lives alone in its range
  users: fc.uniqueArray(fc.oneof(fc.integer({ min: 0, max: 39 }), fc.constant(7_000_000)), {
    minLength: 1,
    maxLength: 30,
  }),
  check: fc.boolean(),
});

describe("priority headroom against the reference model", () => {
  it("decides like the model: no window over max, no lower priority in reserved room, no higher one refused while its room exists", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(capArb, { minLength: 1, maxLength: 2 }),
        fc.array(stepArb, { maxLength: 20 }),
        async (capDocs, steps) => {
          const { capper, clock, caps } = stack(capDocs);
          const model = new PriorityModel(capDocs);
          const windows = capDocs.map((cap) => parseDuration(cap.window) as number);
          // the engine's own counted sends, to judge the invariants apart from the model
          const counted = new Map<number, number[]>();
          let exemptCounted = false;
          for (const step of steps) {
            clock.advance(step.advanceMs);
            const at = clock.now() + step.skewMs;
            const single = step.check ? [step.users[0] as number] : step.users;
            let engine: CapDecision[];
            if (step.check) {
              const result = await capper.checkUser({
                userId: single[0],
                channel: "push",
                at,
                ...(step.campaign === "" ? {} : { campaignId: step.campaign }),
                ...(step.priority === undefined ? {} : { priority: step.priority }),
              });
              engine = [{ userId: single[0] as number, segment: result.segment, decision: result.decision }];
              if (result.decision === "capped" || result.decision === "displaced") {
                expect(result.allowed).toBe(false);
                expect(result.reason).toBe(result.decision === "displaced" ? "reserve" : undefined);
              }
            } else {
              const result = await capper.capBatch({
                campaignId: step.campaign === "" ? "anonymous-blast" : step.campaign,
                channel: "push",
                userIds: single,
                at,
                ...(step.priority === undefined ? {} : { priority: step.priority }),
                ...(step.exempt ? { exempt: true, countExempt: step.countExempt } : {}),
              });
              engine = result.decisions;
            }
            const p = priorityOf(step.priority);
            single.forEach((user, k) => {
              const send: PrioritySend = {
                user,
                at,
                priority: step.priority,
                campaignId: step.check ? step.campaign : step.campaign === "" ? "anonymous-blast" : step.campaign,
                exempt: !step.check && step.exempt,
                countExempt: step.countExempt,
              };
              const expected = model.apply(send);
              const decision = engine[k] as CapDecision;
              const got =
                step.check && decision.decision !== "capped" && decision.decision !== "displaced"
                  ? decision.decision
                  : asModel(decision, caps);
              if (step.check && typeof got !== "string") {
                // a check names no cap; its kind must match
                expect(Object.keys(got)).toEqual(Object.keys(expected as object));
              } else {
                expect(got).toEqual(expected);
              }
              const times = counted.get(user) ?? [];
              counted.set(user, times);
              const refused = decision.decision === "capped" || decision.decision === "displaced";
              if (decision.decision === "allowed") {
                // counted only while every window around `at` had room for its priority
                capDocs.forEach((cap, i) => {
                  const worst = worstAround([...times, at], at, windows[i] as number);
                  expect(worst).toBeLessThanOrEqual(cap.max - modelReserved(cap, p));
                });
                times.push(at);
              } else if (decision.decision === "exempt" && send.exempt && send.countExempt) {
                times.push(at);
                exemptCounted = true;
              } else if (refused) {
                // a higher priority is refused only when some cap has no room for it
                const full = capDocs.some(
                  (cap, i) =>
                    worstAround([...times, at], at, windows[i] as number) >
                    cap.max - (decision.decision === "capped" ? 0 : modelReserved(cap, p)),
                );
                expect(full).toBe(true);
              }
            });
          }
          // no window over max (exempt sends that count may take a window past it by design)
          if (!exemptCounted) {
            for (const times of counted.values()) {
              capDocs.forEach((cap, i) => {
                for (const end of times) {
                  const inside = times.filter((t) => t > end - (windows[i] as number) && t <= end).length;
                  expect(inside).toBeLessThanOrEqual(cap.max);
                }
              });
            }
          }
        },
      ),
      { numRuns: 40 },
    );
  });
});

/** The most sends of `times` any window (x - W, x] containing `at` holds. */
function worstAround(times: readonly number[], at: number, windowMs: number): number {
  let worst = 0;
  for (const end of [at, ...times.filter((t) => t >= at && t < at + windowMs)]) {
    worst = Math.max(worst, times.filter((t) => t > end - windowMs && t <= end).length);
  }
  return worst;
}

describe("priority headroom, hostile but valid", () => {
  it("reserve = max − 1: a promotional send gets exactly one slot, every other slot stays for the reserve's priority", async () => {
    const { capper, clock } = stack([{ window: "1h", max: 4, reserve: { triggered: 3 } }]);
    const send = (campaignId: string, priority?: PriorityName) =>
      capper.capBatch({
        campaignId,
        channel: "push",
        userIds: [1],
        at: clock.now(),
        ...(priority ? { priority } : {}),
      });
    expect((await send("promo-1")).decisions[0]?.decision).toBe("allowed");
    clock.advance(1000);
    expect((await send("promo-2")).decisions[0]?.decision).toBe("displaced");
    for (const id of ["t1", "t2", "t3"]) {
      clock.advance(1000);
      expect((await send(id, "triggered")).decisions[0]?.decision).toBe("allowed");
    }
    clock.advance(1000);
    expect((await send("t4", "transactional")).decisions[0]?.decision).toBe("capped");
  });

  it("a transactional blast fills the reserve, then a promotional send is refused as capped (the cap is full), not displaced", async () => {
    const { capper, clock } = stack([{ window: "1d", max: 2, reserve: { transactional: 1 } }]);
    const users = Array.from({ length: 64 }, (_, i) => i);
    const tx = await capper.capBatch({
      campaignId: "receipts",
      channel: "push",
      userIds: users,
      priority: "transactional",
    });
    expect(new Set(tx.decisions.map((d) => d.decision))).toEqual(new Set(["allowed"]));
    clock.advance(MINUTE);
    const promo = await capper.capBatch({ campaignId: "sale", channel: "push", userIds: users });
    // the reserve's slot is taken and one slot is left: promotional sees max − reserve = 1 with 1 counted
    expect(promo.totals.everyone).toMatchObject({ displaced: 64, displacedBy: { "push:1d": 64 }, capped: 0 });
    clock.advance(MINUTE);
    const tx2 = await capper.capBatch({ campaignId: "receipts-2", channel: "push", userIds: users, priority: 100 });
    expect(tx2.totals.everyone?.allowed).toBe(64);
    clock.advance(MINUTE);
    const promo2 = await capper.capBatch({ campaignId: "sale-2", channel: "push", userIds: users });
    expect(promo2.totals.everyone).toMatchObject({ capped: 64, cappedBy: { "push:1d": 64 } });
    expect(promo2.totals.everyone?.displaced).toBeUndefined();
  });

  it("a promotional blast leaves the reserved slot to a later password reset, sent ahead of the clock by a skewed consumer", async () => {
    const { capper, clock } = stack([{ window: "1h", max: 3, reserve: { transactional: 1 } }]);
    const users = Array.from({ length: 300 }, (_, i) => i);
    for (const campaignId of ["a", "b", "c"]) {
      clock.advance(MINUTE);
      await capper.capBatch({ campaignId, channel: "push", userIds: users, at: clock.now() - 10 * MINUTE });
    }
    const [first] = (await capper.capBatch({ campaignId: "z", channel: "push", userIds: [0] })).decisions;
    expect(first?.decision).toBe("displaced");
    const reset = await capper.capBatch({
      campaignId: "password-reset",
      channel: "push",
      userIds: users,
      at: clock.now() + MAX_FUTURE_MS - 1,
      priority: "transactional",
    });
    expect(reset.totals.everyone?.allowed).toBe(300);
  });

  it("leaves exempt sends as they are: not refused by a full reserve, and counted only with countExempt", async () => {
    const { capper } = stack([{ window: "1d", max: 2, reserve: { triggered: 1 } }]);
    await capper.capBatch({ campaignId: "promo", channel: "push", userIds: [5] });
    const exempt = await capper.capBatch({ campaignId: "legal", channel: "push", userIds: [5], exempt: true });
    expect(exempt.decisions[0]?.decision).toBe("exempt");
    const counted = await capper.capBatch({
      campaignId: "legal-2",
      channel: "push",
      userIds: [5],
      exempt: true,
      countExempt: true,
    });
    expect(counted.decisions[0]?.decision).toBe("exempt");
    // two counted now: the cap is full for every priority
    const tx = await capper.capBatch({ campaignId: "tx", channel: "push", userIds: [5], priority: "transactional" });
    expect(tx.decisions[0]?.decision).toBe("capped");
  });

  it("/v1/frequency with a priority: reason reserve, the room its priority sees, and when it frees up", async () => {
    const { capper, clock } = stack([{ window: "1h", max: 2, reserve: { triggered: 1 } }]);
    const first = await capper.checkUser({ userId: 9, channel: "push", at: clock.now() });
    expect(first).toMatchObject({ allowed: true, decision: "allowed" });
    expect(first.windows[0]).toMatchObject({ max: 2, reserved: 1, used: 1, remaining: 0 });
    clock.advance(MINUTE);
    const second = await capper.checkUser({ userId: 9, channel: "push", consume: false, at: clock.now() });
    expect(second).toMatchObject({
      allowed: false,
      decision: "displaced",
      reason: "reserve",
      retryAfterMs: 59 * MINUTE,
    });
    const triggered = await capper.checkUser({ userId: 9, channel: "push", priority: "triggered", at: clock.now() });
    expect(triggered).toMatchObject({ allowed: true, decision: "allowed" });
    expect(triggered.windows[0]).toEqual({
      channel: "push",
      window: "1h",
      max: 2,
      used: 2,
      remaining: 0,
      resetAt: T0 + 60 * MINUTE,
    });
  });
});
