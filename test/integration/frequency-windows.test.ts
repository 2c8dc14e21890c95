// POST /v1/frequency's windows (used, remaining, resetAt, retryAfterMs) as lua/cap-sends/ works them out
// ("+windows"), against a brute-force model of the user's whole log: random policies and histories, sends
// stamped ahead of the clock and backfilled, checks at skewed and backfilled times, on the record and
// the block path. lua/cap-sends/ decides with fullWindow() and reports with fullestAround(): holding
// both to one reference keeps the window rule one rule.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import {
  planCapSends,
  REPLY_EXEMPT,
  readCapSendsReply,
  scriptProfiles,
} from "../../functions/core/capping/cap-sends-script.ts";
import { Capper } from "../../functions/core/capping/capper.ts";
import { DEFAULT_REDELIVERY_MS, keptHorizonMs, type Policy } from "../../functions/core/capping/policy.ts";
import { fixedClock } from "../../functions/core/shared/clock.ts";
import { CappingModel, modelWindows } from "../support/capping-model.ts";
import { connectCluster, uniqueNamespace } from "../support/cluster.ts";
import { rulesOf, simplePolicy, T0 } from "../support/rules.ts";

let cluster: TollgateCluster;
let store: RedisCapStore;
beforeAll(() => {
  cluster = connectCluster();
  store = new RedisCapStore(cluster);
});
afterAll(async () => {
  await cluster.quit();
});

const NOW = T0 + 10 * 86_400_000;
const USER = 7;
/** Users of USER's page written with it when a history goes through the page block (16 or more per call). */
const PAGE_NEIGHBOURS = Array.from({ length: 20 }, (_, i) => 100 + i);

/**
 * An exempt send that counts, without a campaign ID (one identity per channel, as anonymous checks write),
 * written by the script directly: a campaign batch always names its campaign.
 */
async function countAnonymously(namespace: string, policy: Policy, channel: string, userIds: number[], at: number) {
  const segmentOf = new Uint8Array(userIds.length).fill(policy.segments.length - 1);
  for (const call of planCapSends({
    namespace,
    now: NOW,
    at,
    mode: "count",
    channel,
    campaignId: "",
    forced: true,
    horizonMs: keptHorizonMs(policy, DEFAULT_REDELIVERY_MS),
    profiles: scriptProfiles(policy, channel, DEFAULT_REDELIVERY_MS),
    sortedIds: Uint32Array.from(userIds),
    segmentOf,
  })) {
    const { codes } = readCapSendsReply(await store.capSends(call.keys, call.args), call.members.length);
    expect([...codes].every((code) => code === REPLY_EXEMPT)).toBe(true);
  }
}

describe("the windows of POST /v1/frequency (cap-sends.lua, +windows)", () => {
  it("equal a brute-force reference over the user's whole log, for any caps, history, `at` and check", async () => {
    const cap = fc.record({
      seconds: fc.integer({ min: 1, max: 5 }),
      // a max of 0 (never) now and then
      max: fc.oneof({ weight: 9, arbitrary: fc.integer({ min: 1, max: 3 }) }, { weight: 1, arbitrary: fc.constant(0) }),
    });
    const scenario = fc
      .record({
        push: fc.array(cap, { minLength: 1, maxLength: 2 }),
        email: fc.array(cap, { maxLength: 1 }),
        every: fc.array(cap, { maxLength: 1 }),
      })
      .chain((caps) => {
        const longestMs = 1000 * Math.max(...[...caps.push, ...caps.email, ...caps.every].map((c) => c.seconds));
        // backfilled by up to the longest window (the policy's bound), stamped ahead by up to 3 s
        const offset = fc.oneof(
          fc.constantFrom(-longestMs, -longestMs + 1, -1, 0, 1),
          fc.integer({ min: -longestMs, max: 3_000 }),
        );
        return fc.record({
          caps: fc.constant(caps),
          sends: fc.array(
            fc.record({ offsetMs: offset, channel: fc.constantFrom("push", "email"), campaign: fc.nat({ max: 3 }) }),
            { maxLength: 10 },
          ),
          throughBlock: fc.boolean(),
          // sends without a campaign ID: one identity per channel, so the script reads a user record's
          // sends in place (binary searches) instead of decoding each one with its identity
          anonymous: fc.boolean(),
          check: fc.record({
            offsetMs: offset,
            channel: fc.constantFrom("push", "email"),
            campaign: fc.option(fc.nat({ max: 3 }), { nil: undefined }),
            consume: fc.boolean(),
          }),
        });
      });
    await fc.assert(
      fc.asyncProperty(scenario, async ({ caps, sends, throughBlock, anonymous, check }) => {
        const asCaps = (list: { seconds: number; max: number }[]) =>
          list.map((c) => ({ window: `${c.seconds}s`, max: c.max }));
        const rules = rulesOf(
          simplePolicy({ push: asCaps(caps.push), email: asCaps(caps.email), "*": asCaps(caps.every) }),
        );
        const namespace = uniqueNamespace();
        const capper = new Capper({ store, rules: () => rules, clock: fixedClock(NOW), namespace });
        const model = new CappingModel(rules.policy, () => 1);
        // the history: exempt sends that count, stored whatever the caps say
        for (const [i, send] of sends.entries()) {
          const userIds = throughBlock ? [USER, ...PAGE_NEIGHBOURS] : [USER];
          const campaignId = anonymous ? "" : `c${send.campaign}-${i}`;
          if (anonymous) await countAnonymously(namespace, rules.policy, send.channel, userIds, NOW + send.offsetMs);
          else {
            await capper.capBatch({
              campaignId,
              channel: send.channel,
              userIds,
              at: NOW + send.offsetMs,
              exempt: true,
              countExempt: true,
            });
          }
          model.apply({
            mode: "count",
            now: NOW,
            at: NOW + send.offsetMs,
            channel: send.channel,
            campaignId,
            exemptCounted: true,
            users: [USER],
          });
        }
        // a check with a campaign ID of the history is that send's identity (a duplicate on its channel)
        const campaignId = check.campaign === undefined ? "" : `c${check.campaign}-${check.campaign}`;
        const at = NOW + check.offsetMs;
        const report = await capper.checkUser({
          userId: USER,
          channel: check.channel,
          at,
          consume: check.consume,
          ...(campaignId ? { campaignId } : {}),
        });
        const [decision] = model.apply({
          mode: check.consume ? "count" : "peek",
          now: NOW,
          at,
          channel: check.channel,
          campaignId,
          exemptCounted: false,
          users: [USER],
        });
        const policyCaps = rules.policy.capsFor(1, check.channel);
        const capped = typeof decision === "object";
        expect(report.decision).toBe(capped ? "capped" : decision);
        const expected = modelWindows(model.sendsOf(USER), policyCaps, at, capped);
        expect(report.windows).toEqual(
          policyCaps.map((c, i) => ({
            channel: c.channel,
            window: c.window,
            max: c.max,
            used: expected.caps[i]?.used,
            remaining: Math.max(0, c.max - (expected.caps[i]?.used as number)),
            resetAt: expected.caps[i]?.resetAt,
          })),
        );
        expect(report.retryAfterMs).toBe(
          expected.retryAt === undefined ? undefined : Math.max(1, expected.retryAt - at),
        );
      }),
      { numRuns: 60 },
    );
  });

  it("says 70 s, not 20 s, when sends stamped ahead of now keep the later windows full (push: 2 per 1m)", async () => {
    const rules = rulesOf(simplePolicy({ push: [{ window: "1m", max: 2 }] }));
    const capper = new Capper({ store, rules: () => rules, clock: fixedClock(NOW), namespace: uniqueNamespace() });
    for (const offset of [-40_000, 10_000, 30_000]) {
      await capper.capBatch({ campaignId: `k${offset}`, channel: "push", userIds: [USER], at: NOW + offset });
    }
    const report = await capper.checkUser({ userId: USER, channel: "push", consume: false });
    expect(report).toMatchObject({
      allowed: false,
      retryAfterMs: 70_000,
      windows: [{ used: 2, resetAt: NOW + 20_000 }],
    });
  });

  it("reads a backfilled check's sends past every window around `at` for its retry (a chain stamped ahead of now)", async () => {
    // push: 1 per 10s; sends every 11 s from now - 15 s to now + 4 min (ahead of the clock): a check at
    // now - 10 s is capped, and each time one send leaves its window the next one fills another
    const rules = rulesOf(simplePolicy({ push: [{ window: "10s", max: 1 }] }));
    const clock = fixedClock(NOW);
    const capper = new Capper({ store, rules: () => rules, clock, namespace: uniqueNamespace() });
    const chain = Array.from({ length: 23 }, (_, k) => NOW - 15_000 + k * 11_000);
    for (const [k, t] of chain.entries()) {
      // sends up to now counted live, later ones stamped ahead of the clock
      clock.set(Math.min(t, NOW));
      const sent = await capper.capBatch({ campaignId: `s${k}`, channel: "push", userIds: [USER], at: t });
      expect(sent.decisions[0]?.decision).toBe("allowed");
    }
    const at = NOW - 10_000;
    const report = await capper.checkUser({ userId: USER, channel: "push", at, consume: false });
    expect(report.retryAfterMs).toBe((chain.at(-1) as number) + 10_000 - at);
  });

  it("replies one line of numbers per user whatever its history: 300 sends in the window, one cap", async () => {
    const rules = rulesOf(simplePolicy({ push: [{ window: "1d", max: 10_000 }] }));
    const namespace = uniqueNamespace();
    const capper = new Capper({ store, rules: () => rules, clock: fixedClock(NOW), namespace });
    for (let i = 0; i < 300; i++) {
      await capper.capBatch({ campaignId: `c${i}`, channel: "push", userIds: [USER], at: NOW - 300 + i });
    }
    const [call] = planCapSends({
      namespace,
      now: NOW,
      at: NOW,
      mode: "peek",
      withWindows: true,
      channel: "push",
      campaignId: "",
      forced: false,
      horizonMs: keptHorizonMs(rules.policy, 3_600_000),
      profiles: scriptProfiles(rules.policy, "push", 3_600_000),
      sortedIds: Uint32Array.of(USER),
      segmentOf: Uint8Array.of(1),
    });
    if (!call) throw new Error("no call planned");
    const { codes, lines } = readCapSendsReply(await store.capSends(call.keys, call.args), 1);
    expect([...codes]).toEqual([0]);
    expect(lines).toEqual([`0 300 ${NOW - 300 + 86_400_000}`]);
  });
});
