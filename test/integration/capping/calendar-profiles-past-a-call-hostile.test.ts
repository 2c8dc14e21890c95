// Hostile but valid batches that need more calendar profiles than a script call numbers, so are decided in
// parts (decision 0200), each held to the same users decided one segment at a time or to the contract itself.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import type { CampaignBatchInput } from "../../../functions/core/capping/campaign-batch.ts";
import { campaignBatchSchema } from "../../../functions/core/capping/campaign-batch.ts";
import type { CapStore } from "../../../functions/core/capping/cap-sends-script.ts";
import type { CapBatchResult, CapDecision } from "../../../functions/core/capping/decisions.ts";
import { deferralMessages } from "../../../functions/core/capping/deferral.ts";
import {
  AT,
  MINUTE,
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
async function both(stack: ReturnType<typeof stacks>, batch: CampaignBatchInput & { userIds: number[] }, now: number) {
  stack.clock.set(now);
  const whole = await stack.gate.capBatch(batch);
  const apart = await stack.apart(batch);
  expect(whole.decisions).toEqual(apart.decisions);
  expect(whole.totals).toEqual(apart.totals);
  expect(whole.held).toEqual(apart.held);
  return { whole, apart };
}

describe("a batch past 256 calendar profiles, attacked", () => {
  it("has more segment and zone pairs than 256 (the parts path is reached)", () => {
    expect(SEGMENTS * zones.length).toBeGreaterThan(256);
  });

  it("with quiet hours and defer: its held and deferred users, their zones and groups are those of the same users apart", async () => {
    const stack = stacks({ quiet: true });
    const defer = { maxMs: 20 * HOUR };
    const first = await both(stack, { campaignId: "q0", channel: "push", userIds, at: AT, defer }, AT);
    // some zones are in quiet hours at 12:00 UTC, others not: both occur
    expect(new Set(kindsOf(first.whole))).toEqual(new Set(["allowed", "deferred"]));
    const groups = first.whole.held?.deferred ?? [];
    expect(groups.length).toBeGreaterThan(1);
    const grouped = groups.flatMap((g) => g.userIds);
    expect(new Set(grouped).size).toBe(grouped.length);
    expect(groups.map((g) => g.eligibleAt)).toEqual([...groups.map((g) => g.eligibleAt)].sort((a, b) => a - b));
    // 13 h later: quiet holds and capped deferral in one batch
    const later = await both(
      stack,
      { campaignId: "q1", channel: "push", userIds, at: AT + 13 * HOUR, defer },
      AT + 13 * HOUR,
    );
    expect(new Set(kindsOf(later.whole)).size).toBeGreaterThan(1);
  });

  it("with quiet hours and no defer: quiet users and zone figures as apart, and nothing held is counted", async () => {
    const stack = stacks({ quiet: true });
    const { whole } = await both(stack, { campaignId: "n0", channel: "push", userIds, at: AT }, AT);
    const quiet = whole.decisions.filter((d) => d.decision === "quiet").map((d) => d.userId);
    expect(quiet.length).toBeGreaterThan(0);
    // out of quiet hours everywhere is not possible at one instant; the quiet users are fresh for another campaign
    stack.clock.set(AT);
    const peeked = await stack.gate.peek({ campaignId: "n1", channel: "push", userIds: quiet, at: AT, exempt: true });
    expect(peeked.decisions.every((d) => d.decision === "exempt")).toBe(true);
  });

  it("capped sends deferred in parts: each at its zone's next day, the same instants and groups as apart", async () => {
    const stack = stacks({});
    await both(stack, { campaignId: "d0", channel: "push", userIds, at: AT }, AT);
    const defer = { maxMs: 30 * HOUR };
    const { whole } = await both(
      stack,
      { campaignId: "d1", channel: "push", userIds, at: AT + MINUTE, defer },
      AT + MINUTE,
    );
    expect(whole.decisions.every((d) => d.decision === "deferred" && (d.eligibleAt as number) > AT + MINUTE)).toBe(
      true,
    );
    // a user's eligibleAt is the next local midnight of its zone
    for (const d of whole.decisions) {
      const zone = zones[zoneOfUser(d.userId)] as string;
      const day = (t: number) => new Intl.DateTimeFormat("en-CA", { timeZone: zone }).format(t);
      const e = d.eligibleAt as number;
      expect(day(e - 1), `user ${d.userId} in ${zone}`).toBe(day(AT + MINUTE));
      expect(day(e)).not.toBe(day(AT + MINUTE));
    }
    expect(whole.held?.deferred.reduce((n, g) => n + g.userIds.length, 0)).toBe(USERS);
  });

  it("priority reserves: promotional displaced, transactional allowed then capped, as apart", async () => {
    const stack = stacks({ caps: [{ window: "day", max: 2, reserve: { transactional: 1 } }] });
    const a = await both(stack, { campaignId: "p0", channel: "push", userIds, at: AT }, AT);
    expect(new Set(kindsOf(a.whole))).toEqual(new Set(["allowed"]));
    const b = await both(stack, { campaignId: "p1", channel: "push", userIds, at: AT + 1 }, AT + 1);
    expect(new Set(kindsOf(b.whole))).toEqual(new Set(["displaced"]));
    expect(b.whole.totals.s0?.displacedBy).toEqual({ "push:day": USERS / SEGMENTS });
    const c = await both(
      stack,
      { campaignId: "p2", channel: "push", userIds, at: AT + 2, priority: "transactional" },
      AT + 2,
    );
    expect(new Set(kindsOf(c.whole))).toEqual(new Set(["allowed"]));
    const d = await both(
      stack,
      { campaignId: "p3", channel: "push", userIds, at: AT + 3, priority: "transactional" },
      AT + 3,
    );
    expect(new Set(kindsOf(d.whole))).toEqual(new Set(["capped"]));
  });

  it("displaced sends of a deferring campaign in parts are deferred as apart", async () => {
    const stack = stacks({ caps: [{ window: "day", max: 2, reserve: { transactional: 1 } }] });
    await both(stack, { campaignId: "r0", channel: "push", userIds, at: AT }, AT);
    const { whole } = await both(
      stack,
      { campaignId: "r1", channel: "push", userIds, at: AT + 1, defer: { maxMs: 30 * HOUR } },
      AT + 1,
    );
    expect(new Set(kindsOf(whole))).toEqual(new Set(["deferred"]));
  });

  it("exempt in quiet hours: every send exempt, none held, none counted; countExempt counts each once", async () => {
    const stack = stacks({ quiet: true });
    const input = [...userIds, ...userIds.slice(0, 50)];
    const e = await both(stack, { campaignId: "e0", channel: "push", userIds: input, at: AT, exempt: true }, AT);
    expect(e.whole.decisions.every((d) => d.decision === "exempt")).toBe(true);
    expect(e.whole.held).toBeUndefined();
    // not counted: a normal campaign outside quiet hours is still allowed (with quiet hours off for it: exempt peek)
    const ce = await both(
      stack,
      { campaignId: "e1", channel: "push", userIds: input, at: AT + 1, exempt: true, countExempt: true },
      AT + 1,
    );
    expect(ce.whole.decisions.every((d) => d.decision === "exempt")).toBe(true);
    // counted once each: a normal campaign sees every user out of quiet hours capped by the day
    const n = await both(stack, { campaignId: "e2", channel: "push", userIds, at: AT + 2 }, AT + 2);
    expect(new Set(kindsOf(n.whole))).toEqual(new Set(["capped", "quiet"]));
  });

  it("repeated user IDs scattered through the input: first occurrence decides, repeats duplicate, deferred once", async () => {
    const stack = stacks({ quiet: true });
    const input = shuffled([...userIds, ...userIds, ...userIds.filter((u) => u % 3 === 0)]);
    const defer = { maxMs: 20 * HOUR };
    const { whole } = await both(stack, { campaignId: "x0", channel: "push", userIds: input, at: AT, defer }, AT);
    expect(whole.decisions.map((d) => d.userId)).toEqual(input);
    const seen = new Set<number>();
    input.forEach((u, i) => {
      const d = whole.decisions[i] as CapDecision;
      if (!seen.has(u)) expect(["allowed", "deferred"]).toContain(d.decision);
      else expect(["duplicate", "deferred"]).toContain(d.decision);
      seen.add(u);
    });
    const grouped = (whole.held?.deferred ?? []).flatMap((g) => g.userIds);
    expect(new Set(grouped).size).toBe(grouped.length);
    // capped deferral with repeats, 13 h on
    const later = await both(
      stack,
      { campaignId: "x1", channel: "push", userIds: input, at: AT + 13 * HOUR, defer },
      AT + 13 * HOUR,
    );
    const laterGrouped = (later.whole.held?.deferred ?? []).flatMap((g) => g.userIds);
    expect(new Set(laterGrouped).size).toBe(laterGrouped.length);
  });

  it("peek and peekEligible of such a batch count nothing and name each capped user's retry time as apart", async () => {
    const stack = stacks({});
    await both(stack, { campaignId: "k0", channel: "push", userIds, at: AT }, AT);
    stack.clock.set(AT + MINUTE);
    const batch = { campaignId: "k1", channel: "push", userIds: shuffled(userIds), at: AT + MINUTE };
    const peeked = await stack.gate.peek(batch);
    const { result, eligibleAt } = await stack.gate.peekEligible(batch);
    expect(result).toEqual(peeked);
    expect(new Set(kindsOf(result))).toEqual(new Set(["capped"]));
    expect([...eligibleAt.keys()].sort((a, b) => a - b)).toEqual(userIds);
    const reference = new Map<number, number>();
    for (let s = 0; s < SEGMENTS; s++) {
      const ids = userIds.filter((u) => segmentOfUser(u) === s);
      const own = stack.make(stack.namespace);
      for (const [u, t] of (await own.peekEligible({ ...batch, userIds: ids })).eligibleAt) reference.set(u, t);
    }
    expect(new Map([...eligibleAt].sort(([a], [b]) => a - b))).toEqual(
      new Map([...reference].sort(([a], [b]) => a - b)),
    );
    // nothing counted: the same campaign at AT + MINUTE still finds each user capped, not duplicate
    const after = await stack.gate.capBatch(batch);
    expect(after.decisions).toEqual(peeked.decisions);
  });

  // regression: peekEligible keyed the windows by the decided (unheld) users' index but read them in all users
  it("peekEligible with quiet hours: retry times only for capped users, each its own", async () => {
    const stack = stacks({ quiet: true });
    await both(stack, { campaignId: "w0", channel: "push", userIds, at: AT }, AT);
    stack.clock.set(AT + HOUR);
    const batch = { campaignId: "w1", channel: "push", userIds, at: AT + HOUR };
    const { result, eligibleAt } = await stack.gate.peekEligible(batch);
    const capped = result.decisions.filter((d) => d.decision === "capped").map((d) => d.userId);
    expect(capped.length).toBeGreaterThan(0);
    expect([...eligibleAt.keys()].sort((a, b) => a - b)).toEqual(capped.sort((a, b) => a - b));
  });

  // regression (before the parts too): the same index shift on a batch of one segment, decided whole
  it("peekEligible with quiet hours of a small batch (no parts): retry times only for capped users", async () => {
    const stack = stacks({ quiet: true });
    const ids = userIds.filter((u) => segmentOfUser(u) === 0);
    stack.clock.set(AT);
    await stack.gate.capBatch({ campaignId: "v0", channel: "push", userIds: ids, at: AT });
    stack.clock.set(AT + HOUR);
    const { result, eligibleAt } = await stack.gate.peekEligible({
      campaignId: "v1",
      channel: "push",
      userIds: ids,
      at: AT + HOUR,
    });
    const capped = result.decisions.filter((d) => d.decision === "capped").map((d) => d.userId);
    expect(capped.length).toBeGreaterThan(0);
    expect([...eligibleAt.keys()].sort((a, b) => a - b)).toEqual(capped.sort((a, b) => a - b));
  });
});

describe("batches past 256 calendar profiles decided at one instant", () => {
  it("a batch after others filled the shared numbering, and one decided beside them, decide as apart", async () => {
    const stack = stacks({ caps: [{ window: "day", max: 3 }] });
    stack.clock.set(AT);
    const early = userIds.filter((u) => segmentOfUser(u) < 6);
    const late = userIds.filter((u) => segmentOfUser(u) >= 6);
    // 6 segments' pairs (about 228) then 2 more at the same instant: the shared numbering passes 256
    const a = await stack.gate.capBatch({ campaignId: "s0", channel: "push", userIds: early, at: AT });
    const b = await stack.gate.capBatch({ campaignId: "s0", channel: "push", userIds: late, at: AT });
    expect(new Set([...kindsOf(a), ...kindsOf(b)])).toEqual(new Set(["allowed"]));
    // concurrently: a whole batch and two small ones, all sharing the instant
    const [whole, small1, small2] = await Promise.all([
      stack.gate.capBatch({ campaignId: "s1", channel: "push", userIds, at: AT }),
      stack.gate.capBatch({ campaignId: "s2", channel: "push", userIds: late, at: AT }),
      stack.gate.capBatch({ campaignId: "s2", channel: "push", userIds: early, at: AT }),
    ]);
    expect(new Set([...kindsOf(whole), ...kindsOf(small1), ...kindsOf(small2)])).toEqual(new Set(["allowed"]));
    // three sends each: a fourth campaign at the same instant is capped for everyone, a repeat a duplicate
    const [capped, again] = await Promise.all([
      stack.gate.capBatch({ campaignId: "s3", channel: "push", userIds, at: AT }),
      stack.gate.capBatch({ campaignId: "s1", channel: "push", userIds: shuffled(userIds), at: AT }),
    ]);
    expect(new Set(kindsOf(capped))).toEqual(new Set(["capped"]));
    expect(new Set(kindsOf(again))).toEqual(new Set(["duplicate"]));
  });

  it("checkUser after a batch in parts reports the send in its zone's day", async () => {
    const stack = stacks({});
    await both(stack, { campaignId: "u0", channel: "push", userIds, at: AT }, AT);
    stack.clock.set(AT + HOUR);
    for (const user of [0, USERS - 1, 7 + SEGMENTS * 20]) {
      const report = await stack.gate.checkUser({ userId: user, channel: "push", consume: false, at: AT + HOUR });
      expect(report.allowed, `user ${user}`).toBe(false);
      const zone = zones[zoneOfUser(user)] as string;
      const day = (t: number) => new Intl.DateTimeFormat("en-CA", { timeZone: zone }).format(t);
      const window = report.windows[0] as { used: number; resetAt: number };
      expect(window.used).toBe(1);
      expect(day(window.resetAt - 1)).toBe(day(AT + HOUR));
      expect(day(window.resetAt)).not.toBe(day(AT + HOUR));
    }
  });

  it("two whole batches of one campaign decided together count each user once between them", async () => {
    const stack = stacks({});
    stack.clock.set(AT);
    const batch = { campaignId: "t0", channel: "push", at: AT };
    const [a, b] = await Promise.all([
      stack.gate.capBatch({ ...batch, userIds }, { now: AT }),
      stack.gate.capBatch({ ...batch, userIds: shuffled(userIds, 11) }, { now: AT }),
    ]);
    const allowed = [...a.decisions, ...b.decisions].filter((d) => d.decision === "allowed").map((d) => d.userId);
    expect(allowed.sort((x, y) => x - y)).toEqual(userIds);
    const others = [...a.decisions, ...b.decisions].filter((d) => d.decision !== "allowed");
    expect(new Set(others.map((d) => d.decision))).toEqual(new Set(["duplicate"]));
  });
});

describe("the deferred messages of a batch past 256 calendar profiles", () => {
  it("re-decided each at its eligibleAt (with the clock there), allow every deferred send once", async () => {
    const stack = stacks({ quiet: true });
    const defer = { maxMs: 30 * HOUR };
    await both(stack, { campaignId: "y0", channel: "push", userIds, at: AT }, AT);
    const batch = { campaignId: "y1", channel: "push", userIds, at: AT + MINUTE, defer };
    const { whole } = await both(stack, batch, AT + MINUTE);
    const messages = deferralMessages(campaignBatchSchema.parse(batch), whole);
    expect(messages.length).toBeGreaterThan(1);
    const allowed: number[] = [];
    for (const message of messages) {
      stack.clock.set(message.eligibleAt);
      const result = await stack.gate.capBatch(JSON.parse(message.body));
      for (const d of result.decisions) {
        expect(d.decision === "allowed" || d.decision === "deferred", `user ${d.userId}: ${d.decision}`).toBe(true);
        if (d.decision === "allowed") allowed.push(d.userId);
      }
    }
    expect(new Set(allowed).size).toBe(allowed.length);
    expect(allowed.length).toBeGreaterThan(0);
  });
});

describe("a batch past 256 calendar profiles with every page write", () => {
  for (const writes of [{ hotRecords: true }, { compactClasses: true }, { hotRecords: true, compactClasses: true }]) {
    it(`decides as apart, its pages written by two parts (${JSON.stringify(writes)})`, async () => {
      const stack = stacks({ caps: [{ window: "day", max: 2 }], writes });
      const input = shuffled([...userIds, ...userIds.slice(0, 40)]);
      const a = await both(stack, { campaignId: "c0", channel: "push", userIds: input, at: AT }, AT);
      expect(new Set(kindsOf(a.whole))).toEqual(new Set(["allowed", "duplicate"]));
      const again = await both(stack, { campaignId: "c0", channel: "push", userIds: input, at: AT + 1 }, AT + 1);
      expect(new Set(kindsOf(again.whole))).toEqual(new Set(["duplicate"]));
      await both(stack, { campaignId: "c1", channel: "push", userIds, at: AT + 2 }, AT + 2);
      const capped = await both(stack, { campaignId: "c2", channel: "push", userIds, at: AT + 3 }, AT + 3);
      expect(new Set(kindsOf(capped.whole))).toEqual(new Set(["capped"]));
    });
  }
});

describe("a batch past 256 calendar profiles of users in many cap tags", () => {
  // user u's ID in a tag of its own, its segment kept (1024 is a multiple of 8), its zone spread
  const ids = userIds.map((u) => u * 1024 + (u % 1024));
  const pairs = new Set(ids.map((id) => `${segmentOfUser(id)}|${zoneOfUser(id)}`));

  it("decides as apart: allowed, then duplicate, then capped; with quiet hours and defer", async () => {
    expect(pairs.size).toBeGreaterThan(256);
    const stack = stacks({ ids });
    const input = shuffled(ids);
    const a = await both(stack, { campaignId: "z0", channel: "push", userIds: input, at: AT }, AT);
    expect(new Set(kindsOf(a.whole))).toEqual(new Set(["allowed"]));
    const again = await both(stack, { campaignId: "z0", channel: "push", userIds: ids, at: AT + 1 }, AT + 1);
    expect(new Set(kindsOf(again.whole))).toEqual(new Set(["duplicate"]));
    const capped = await both(stack, { campaignId: "z1", channel: "push", userIds: ids, at: AT + 2 }, AT + 2);
    expect(new Set(kindsOf(capped.whole))).toEqual(new Set(["capped"]));
    const quiet = stacks({ ids, quiet: true });
    const defer = { maxMs: 30 * HOUR };
    await both(quiet, { campaignId: "z2", channel: "push", userIds: input, at: AT, defer }, AT);
    await both(quiet, { campaignId: "z3", channel: "push", userIds: input, at: AT + MINUTE, defer }, AT + MINUTE);
  });
});

describe("a batch past 256 calendar profiles whose second part is all held", () => {
  // s6 and s7 quiet all week but Sunday 22:00 to midnight: every user of the second part is held at AT
  const allWeek = {
    push: [
      { from: "00:00", to: "22:00" },
      { from: "22:00", to: "00:00", days: ["mon", "tue", "wed", "thu", "fri", "sat"] },
    ],
  };
  const quietOf = (segment: number) => (segment >= 6 ? allWeek : undefined);

  for (const defer of [undefined, { maxMs: 30 * HOUR }]) {
    it(`decides as apart, the held users counted nowhere (${defer ? "defer" : "no defer"})`, async () => {
      const stack = stacks({ quietOf });
      const batch = {
        campaignId: "o0",
        channel: "push",
        userIds: shuffled(userIds),
        at: AT,
        ...(defer ? { defer } : {}),
      };
      const { whole } = await both(stack, batch, AT);
      const held = whole.decisions.filter((d) => segmentOfUser(d.userId) >= 6);
      // the next free hours are on Sunday, past 30 h: dropped with defer
      expect(new Set(held.map((d) => d.decision))).toEqual(new Set([defer ? "dropped" : "quiet"]));
      expect(new Set(whole.decisions.filter((d) => segmentOfUser(d.userId) < 6).map((d) => d.decision))).toEqual(
        new Set(["allowed"]),
      );
      const exempt = await stack.gate.capBatch({ ...batch, campaignId: "o1", exempt: true, countExempt: true });
      expect(new Set(kindsOf(exempt))).toEqual(new Set(["exempt"]));
    });
  }
});
