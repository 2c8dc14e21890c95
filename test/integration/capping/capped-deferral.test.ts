// Deferral of capped sends on the real cluster: a campaign with `defer` has its capped sends re-decided at the
// earliest instant every cap admits them, against a reference model written from the contract
// (test/support/deferral-model.ts), then named hostile cases. The deferred messages are the ones the consumer
// hands to the scheduler (deferralMessages), re-decided with the clock pinned at their instant.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { campaignDecisionLines } from "../../../functions/core/capping/archive-lines.ts";
import type { CampaignBatch } from "../../../functions/core/capping/campaign-batch.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import type { CapBatchResult, CapDecision } from "../../../functions/core/capping/decisions.ts";
import { deferralMessages } from "../../../functions/core/capping/deferral.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { DeferralModel, type ModelCap } from "../../support/deferral-model.ts";
import { HOUR, rulesOf, T0 } from "../../support/rules.ts";

const MINUTE = 60_000;

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

interface CapSpec {
  window: string;
  max: number;
}

function stack(push: CapSpec[], every: CapSpec[] = [], extra: Record<string, unknown> = {}) {
  const policy = {
    version: "defer.1",
    channels: ["push", "email"],
    segments: [],
    default: { name: "everyone", caps: { push, ...(every.length > 0 ? { "*": every } : {}) } },
    ...extra,
  };
  const rules = rulesOf(policy);
  const clock = fixedClock(T0);
  const capper = new Capper({
    store: new RedisCapStore(cluster),
    rules: () => rules,
    clock,
    namespace: uniqueNamespace(),
  });
  const caps = rules.policy.capsFor(rules.policy.defaultSegment, "push");
  return { capper, clock, caps };
}

/** Decides `batch` with the clock at `now`; the result and the deferred messages the consumer would schedule. */
async function decide(
  { capper, clock }: { capper: Capper; clock: ReturnType<typeof fixedClock> },
  batch: CampaignBatch,
  now: number,
): Promise<{ result: CapBatchResult; deferred: CampaignBatch[] }> {
  clock.set(now);
  const result = await capper.capBatch(batch);
  return { result, deferred: deferralMessages(batch, result).map((d) => JSON.parse(d.body) as CampaignBatch) };
}

const byUser = (result: CapBatchResult) => new Map(result.decisions.map((d) => [d.userId, d]));

describe("capped sends of a deferring campaign, against the model", () => {
  const windowArb = fc.constantFrom(["10m", 10 * MINUTE], ["30m", 30 * MINUTE], ["1h", HOUR]) as fc.Arbitrary<
    [string, number]
  >;
  const capsArb = fc.uniqueArray(
    fc.record({ window: windowArb, max: fc.oneof(fc.integer({ min: 1, max: 3 }), fc.constant(0)) }),
    {
      minLength: 1,
      maxLength: 3,
      selector: (cap) => cap.window[0],
    },
  );
  const everyArb = fc.option(fc.record({ max: fc.integer({ min: 1, max: 4 }) }), { nil: undefined });
  const sendArb = fc.record({
    user: fc.integer({ min: 0, max: 3 }),
    channel: fc.constantFrom("push", "push", "email"),
    offset: fc.integer({ min: -10 * MINUTE, max: 5 * MINUTE }),
  });

  it("defers each capped send to the model's earliest admitting instant, re-decides it there, counts it once", async () => {
    const seen: Record<string, number> = {};
    await fc.assert(
      fc.asyncProperty(
        capsArb,
        everyArb,
        fc.array(sendArb, { maxLength: 14 }),
        fc.integer({ min: 0, max: 3 * HOUR }),
        fc.integer({ min: 0, max: 3 * MINUTE }),
        async (pushCaps, every, prior, maxMs, skew) => {
          const push = pushCaps.map(({ window, max }) => ({ window: window[0], max }));
          const all = every ? [{ window: "2h", max: every.max }] : [];
          const s = stack(push, all);
          const model = new DeferralModel([
            ...pushCaps.map(({ window, max }) => ({ channel: "push", windowMs: window[1], max })),
            ...all.map((cap) => ({ channel: "*", windowMs: 2 * HOUR, max: cap.max })),
          ] satisfies ModelCap[]);
          const asModel = (d: CapDecision) => ({
            decision: d.decision,
            ...(d.cap ? { cap: s.caps.indexOf(d.cap) } : {}),
            ...(d.eligibleAt !== undefined ? { eligibleAt: d.eligibleAt } : {}),
          });
          for (const [i, send] of prior.entries()) {
            const batch = { campaignId: `p${i}`, channel: send.channel, userIds: [send.user], at: T0 + send.offset };
            const { result } = await decide(s, batch, T0);
            const expected = model.decide(send.user, { ...batch, judgedAt: Math.max(batch.at, T0) });
            expect(asModel(result.decisions[0] as CapDecision)).toEqual(expected);
          }
          // the deferring campaign, decided `skew` after T0 at T0 + skew
          const users = [0, 1, 2, 3];
          const first: CampaignBatch = { campaignId: "d", channel: "push", userIds: users, defer: { maxMs } };
          const queue: { now: number; batch: CampaignBatch }[] = [{ now: T0 + skew, batch: first }];
          let rounds = 0;
          while (queue.length > 0) {
            expect(rounds++).toBeLessThan(40);
            queue.sort((a, b) => a.now - b.now);
            const { now, batch } = queue.shift() as { now: number; batch: CampaignBatch };
            const { result, deferred } = await decide(s, batch, now);
            const decided = byUser(result);
            for (const user of batch.userIds) {
              const at = batch.at ?? now;
              const expected = model.decide(
                user,
                { campaignId: "d", channel: "push", at, judgedAt: Math.max(at, now) },
                batch.defer,
              );
              expect(asModel(decided.get(user) as CapDecision)).toEqual(expected);
              seen[expected.decision] = (seen[expected.decision] ?? 0) + 1;
              if (expected.decision === "deferred") {
                // re-decided at its instant, never earlier
                expect(expected.eligibleAt).toBeGreaterThan(at);
                expect((expected.eligibleAt as number) - (batch.defer?.since ?? now)).toBeLessThanOrEqual(maxMs);
              }
            }
            // the same message again (a redelivery): counted sends are duplicates, the rest decided as before
            const again = byUser((await decide(s, batch, now)).result);
            for (const user of batch.userIds) {
              const before = decided.get(user) as CapDecision;
              const expected = before.decision === "allowed" ? "duplicate" : before.decision;
              expect((again.get(user) as CapDecision).decision).toBe(expected);
            }
            for (const message of deferred) {
              expect(message.defer?.since).toBe(batch.defer?.since ?? now);
              queue.push({ now: message.at as number, batch: message });
            }
          }
          for (const user of users) expect(model.overMax(user)).toBe(false);
        },
      ),
      { numRuns: 60 },
    );
    // the runs reached every outcome (not a property that holds because nothing was deferred)
    expect(Object.keys(seen).sort()).toEqual(["allowed", "deferred", "dropped"]);
  });
});

describe("capped sends of a deferring campaign, named cases", () => {
  it("two campaigns deferred to the same instant compete for one slot: one sent, the other deferred again, then dropped at maxMs", async () => {
    const s = stack([{ window: "1h", max: 1 }]);
    // the slot taken at T0: both campaigns are capped until T0 + 1h
    await decide(s, { campaignId: "c0", channel: "push", userIds: [7] }, T0);
    const a = await decide(
      s,
      { campaignId: "a", channel: "push", userIds: [7], defer: { maxMs: 90 * MINUTE } },
      T0 + MINUTE,
    );
    const b = await decide(
      s,
      { campaignId: "b", channel: "push", userIds: [7], defer: { maxMs: 90 * MINUTE } },
      T0 + MINUTE,
    );
    expect(a.result.decisions[0]).toMatchObject({ decision: "deferred", eligibleAt: T0 + HOUR });
    expect(b.result.decisions[0]).toMatchObject({ decision: "deferred", eligibleAt: T0 + HOUR });
    const [aBack] = a.deferred;
    const [bBack] = b.deferred;
    const sent = await decide(s, aBack as CampaignBatch, T0 + HOUR);
    expect(sent.result.decisions[0]?.decision).toBe("allowed");
    // b's slot went to a: next admitted at T0 + 2h, past since (T0 + 1m) + 90m: dropped with its cap
    const lost = await decide(s, bBack as CampaignBatch, T0 + HOUR);
    expect(lost.result.decisions[0]).toMatchObject({ decision: "dropped", eligibleAt: T0 + 2 * HOUR });
    expect(lost.result.decisions[0]?.cap).toBe(s.caps[0]);
    expect(lost.deferred).toEqual([]);
    expect(lost.result.totals.everyone).toMatchObject({ dropped: 1, droppedBy: { "push:1h": 1 } });
  });

  it("a deferred batch delivered twice is counted once and keeps the campaign's identity", async () => {
    const s = stack([{ window: "1h", max: 1 }]);
    await decide(s, { campaignId: "c0", channel: "push", userIds: [1, 2, 3] }, T0);
    const first = await decide(
      s,
      { campaignId: "d", channel: "push", userIds: [1, 2, 3], defer: { maxMs: 2 * HOUR } },
      T0,
    );
    expect(first.result.totals.everyone).toMatchObject({ deferred: 3, deferredBy: { "push:1h": 3 } });
    expect(first.deferred).toHaveLength(1);
    const back = first.deferred[0] as CampaignBatch;
    expect(back).toMatchObject({ campaignId: "d", at: T0 + HOUR, defer: { maxMs: 2 * HOUR, since: T0 } });
    const once = await decide(s, back, T0 + HOUR);
    const twice = await decide(s, back, T0 + HOUR);
    expect(once.result.totals.everyone).toMatchObject({ allowed: 3 });
    expect(twice.result.totals.everyone).toMatchObject({ allowed: 0, duplicate: 3 });
    // counted once: one more campaign at T0 + 1h is capped
    const after = await decide(s, { campaignId: "e", channel: "push", userIds: [1] }, T0 + HOUR);
    expect(after.result.decisions[0]?.decision).toBe("capped");
  });

  it("a capped send whose eligible instant falls inside quiet hours is deferred to their end", async () => {
    const s = stack([{ window: "1h", max: 1 }], [], {
      defaultZone: "UTC",
      quietHours: { push: [{ from: "00:30", to: "06:00" }] },
    });
    // T0 is 00:00 UTC: the slot frees at 01:00, inside 00:30-06:00, so the send waits for 06:00
    await decide(s, { campaignId: "c0", channel: "push", userIds: [4] }, T0);
    const d = await decide(
      s,
      { campaignId: "d", channel: "push", userIds: [4], defer: { maxMs: 8 * HOUR } },
      T0 + MINUTE,
    );
    expect(d.result.decisions[0]).toMatchObject({ decision: "deferred", eligibleAt: T0 + 6 * HOUR });
    const back = await decide(s, d.deferred[0] as CampaignBatch, T0 + 6 * HOUR);
    expect(back.result.decisions[0]?.decision).toBe("allowed");
  });

  it("a send capped by a calendar day is deferred to the next midnight of the user's zone", async () => {
    const s = stack([{ window: "day", max: 1 }], [], { defaultZone: "America/New_York" });
    // T0 is 2026-11-01 19:00 in New York (EST since 02:00 that day, a 25-hour day): its day ends at 05:00 UTC
    await decide(s, { campaignId: "c0", channel: "push", userIds: [9] }, T0);
    const d = await decide(
      s,
      { campaignId: "d", channel: "push", userIds: [9], defer: { maxMs: 12 * HOUR } },
      T0 + MINUTE,
    );
    expect(d.result.decisions[0]).toMatchObject({ decision: "deferred", eligibleAt: T0 + 5 * HOUR });
    expect(d.deferred[0]?.at).toBe(T0 + 5 * HOUR);
    const back = await decide(s, d.deferred[0] as CampaignBatch, T0 + 5 * HOUR);
    expect(back.result.decisions[0]?.decision).toBe("allowed");
  });

  it("maxMs 0 drops a capped send at once, with its cap and eligibleAt", async () => {
    const s = stack([{ window: "1h", max: 1 }]);
    await decide(s, { campaignId: "c0", channel: "push", userIds: [5] }, T0);
    const batch: CampaignBatch = { campaignId: "d", channel: "push", userIds: [5], defer: { maxMs: 0 } };
    const d = await decide(s, batch, T0);
    expect(d.result.decisions[0]).toMatchObject({ decision: "dropped", eligibleAt: T0 + HOUR, cap: s.caps[0] });
    expect(d.deferred).toEqual([]);
    // archived with its reason: the cap, not quiet hours
    const lines: string[] = [];
    campaignDecisionLines(batch, d.result, T0, (line) => lines.push(line));
    expect(lines.join("")).toContain('"decision":"dropped","reason":"cap","cap":"push:1h"');
  });

  it("a cap of 0 never admits: dropped without an eligibleAt", async () => {
    const s = stack([{ window: "1h", max: 0 }]);
    const d = await decide(s, { campaignId: "d", channel: "push", userIds: [6], defer: { maxMs: HOUR } }, T0);
    expect(d.result.decisions[0]).toMatchObject({ decision: "dropped" });
    expect(d.result.decisions[0]?.eligibleAt).toBeUndefined();
  });

  it("a displaced send defers the same way, to when the room its priority sees frees", async () => {
    const s = stack([{ window: "1h", max: 2, reserve: { triggered: 1 } } as CapSpec]);
    await decide(s, { campaignId: "c0", channel: "push", userIds: [8] }, T0);
    const d = await decide(
      s,
      { campaignId: "d", channel: "push", userIds: [8], defer: { maxMs: 2 * HOUR } },
      T0 + MINUTE,
    );
    expect(d.result.decisions[0]).toMatchObject({ decision: "deferred", eligibleAt: T0 + HOUR });
  });
});
