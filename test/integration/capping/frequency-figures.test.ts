// POST /v1/frequency's figures (used, remaining, retryAfterMs) against a ledger, on the record and block paths.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { capIdentityKey, capTagOf } from "../../../sdk/src/protocol/index.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { rulesOf, T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
let store: RedisCapStore;
beforeAll(() => {
  cluster = connectCluster();
  store = new RedisCapStore(cluster);
});
afterAll(async () => {
  await cluster.quit();
});

describe("review: /v1/frequency figures against a ledger (DESIGN.md 'Check API', docs/api.md)", () => {
  it("decides, and reports used, remaining and retryAfterMs, as a ledger does, for users 0 and 2^31 - 1 on the record and block paths, with backfills, sends stamped ahead and identity numbers past 255 and 65,535", async () => {
    const MINUTE = 60_000;
    const stepArbitrary = fc.record({
      kind: fc.constantFrom("check", "check", "peek", "batch", "dense", "repeat", "jump"),
      user: fc.constantFrom(0, 1, 2 ** 31 - 1),
      channel: fc.constantFrom("a", "b"),
      anonymous: fc.boolean(),
      advance: fc.integer({ min: 0, max: 4 * MINUTE }),
      // behind the clock (backfills) or ahead of it by up to the 5-minute bound (skew)
      back: fc.oneof(fc.integer({ min: 0, max: 2 * MINUTE }), fc.integer({ min: -5 * MINUTE, max: 0 })),
      pick: fc.nat(),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 2, max: 6 }),
        fc.integer({ min: 3, max: 9 }),
        fc.array(stepArbitrary, { minLength: 10, maxLength: 40 }),
        async (maxA, maxEvery, steps) => {
          const caps = { a: [{ window: "10m", max: maxA }], "*": [{ window: "30m", max: maxEvery }] };
          const rules = rulesOf({ version: "v", channels: ["a", "b"], segments: [], default: { name: "rest", caps } });
          const clock = fixedClock(T0);
          const namespace = uniqueNamespace();
          const capper = new Capper({ store, rules: () => rules, clock, namespace });
          const ledger = new Map<number, Array<{ t: number; channel: string; identity: string }>>();
          const campaigns: string[] = [];
          let serial = 0;
          // per cap that applies (the channel's own first, then "*"): the fullest window (x - w, x] containing at
          const windowsFor = (user: number, channel: string, at: number) =>
            [
              ...(channel === "a" ? [{ scope: "a", w: 10 * MINUTE, max: maxA }] : []),
              { scope: "*", w: 30 * MINUTE, max: maxEvery },
            ].map((cap) => {
              const times = (ledger.get(user) ?? [])
                .filter((s) => cap.scope === "*" || s.channel === cap.scope)
                .map((s) => s.t);
              const ends = [at, ...times.filter((s) => s > at && s < at + cap.w)];
              const fullest = Math.max(...ends.map((x) => times.filter((s) => s > x - cap.w && s <= x).length));
              return { ...cap, fullest };
            });
          for (const step of steps) {
            clock.advance(step.advance);
            if (step.kind === "jump") {
              // the tag's identity numbers as after 250, then 65,530 earlier identities (set directly)
              const table = capIdentityKey(namespace, capTagOf(0));
              const next = Number((await cluster.hget(table, "next")) ?? 0);
              if (next < 65_530) await cluster.hset(table, "next", next < 250 ? 250 : 65_530);
              continue;
            }
            const at = clock.now() - step.back;
            const repeat = step.kind === "repeat" && campaigns.length > 0;
            const named = step.kind === "batch" || step.kind === "dense" || !step.anonymous;
            const campaignId = repeat
              ? (campaigns[step.pick % campaigns.length] as string)
              : named
                ? `c${serial++}`
                : "";
            if (campaignId && !repeat) campaigns.push(campaignId);
            const mine = ledger.get(step.user) ?? [];
            const duplicate = campaignId !== "" && mine.some((s) => s.identity === `${step.channel}:${campaignId}`);
            const windows = windowsFor(step.user, step.channel, at);
            const expected = duplicate ? "duplicate" : windows.some((w) => w.fullest >= w.max) ? "capped" : "allowed";
            const context = JSON.stringify({ step, at: at - T0, campaignId, ledger: mine.map((s) => s.t - T0) });
            if (step.kind === "batch" || step.kind === "dense") {
              // dense: with 20 neighbours of its page, so the page goes through its block
              const neighbours =
                step.kind === "dense"
                  ? Array.from({ length: 20 }, (_, i) => (step.user < 256 ? 100 + i : step.user - 100 - i))
                  : [];
              const result = await capper.capBatch({
                campaignId,
                channel: step.channel,
                userIds: [step.user, ...neighbours],
                at,
              });
              expect(result.decisions[0]?.decision, context).toBe(expected);
            } else {
              const result = await capper.checkUser({
                userId: step.user,
                channel: step.channel,
                at,
                ...(campaignId ? { campaignId } : {}),
                ...(step.kind === "peek" ? { consume: false } : {}),
              });
              expect(result.decision, context).toBe(expected);
              if (!duplicate) {
                const counted = expected === "allowed" && step.kind !== "peek" ? 1 : 0;
                expect(
                  result.windows.map((w) => ({ channel: w.channel, used: w.used, remaining: w.remaining })),
                  context,
                ).toEqual(
                  windows.map((w) => ({
                    channel: w.scope,
                    used: w.fullest + counted,
                    remaining: Math.max(0, w.max - w.fullest - counted),
                  })),
                );
              }
              if (expected === "capped") {
                // the earliest time the same check has room in every window around it
                const free = (t: number) => windowsFor(step.user, step.channel, t).every((w) => w.fullest < w.max);
                const later = at + (result.retryAfterMs as number);
                expect(result.retryAfterMs, context).toBeGreaterThanOrEqual(1);
                expect([free(later - 1), free(later)], context).toEqual([false, true]);
              }
            }
            if (expected === "allowed" && step.kind !== "peek") {
              const identity = campaignId ? `${step.channel}:${campaignId}` : `anonymous-${serial++}`;
              ledger.set(step.user, [...mine, { t: at, channel: step.channel, identity }]);
            }
          }
        },
      ),
      { numRuns: Number(process.env.REVIEW_RUNS ?? 10) },
    );
  }, 120_000);
});
