// Quiet hours and deferral end to end on the local stack: a campaign to users in six zones and the default
// one, on the night the US springs forward, with the functions' clock pinned. Sends inside quiet hours are
// neither delivered nor counted; deferred ones come back through the local scheduler at their instant, are
// counted once however often they come back, and keep their dedupe ids.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { uploadObject } from "../../../functions/app/operator-actions.ts";
import type { ConsumeOutcome } from "../../../functions/core/capping/campaign-consumer.ts";
import { zoneBitmapKey } from "../../../functions/core/capping/policy.ts";
import { buildSegments } from "../../../functions/core/capping/segment-builder.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { clientsOf, drainDelivery, invoke, receive, sendRaw, testStack, uploadRules } from "../../support/pipeline.ts";

const HOUR = 3_600_000;
// pinned: the stack's clock, 2026-03-08 06:30 UTC (01:30 EST in New York, half an hour before it springs forward)
const T = 1_772_951_400_000;
const ZONES = [
  "America/New_York",
  "America/Los_Angeles",
  "Europe/London",
  "Asia/Singapore",
  "Australia/Sydney",
  "Asia/Kolkata",
] as const;
const PER_ZONE = 100;
/** Users 0-599 live in ZONES (100 each, in order), 600-699 in no zone bitmap: the default zone (UTC). */
const users = Array.from({ length: 700 }, (_, i) => i);
const zoneOf = (user: number) => ZONES[Math.floor(user / PER_ZONE)] ?? "UTC";
/**
 * 21:00-08:00 local, read off the clock above: London and UTC end at 08:00 UTC; New York (01:30 EST) and Los
 * Angeles (22:30 PST) both spring forward before their night ends, at 08:00 EDT (12:00 UTC) and 08:00 PDT
 * (15:00 UTC): nights of 10 and 10 hours.
 */
const EXPECTED: Record<string, number | undefined> = {
  "America/New_York": T + 5.5 * HOUR,
  "America/Los_Angeles": T + 8.5 * HOUR,
  "Europe/London": T + 1.5 * HOUR,
  UTC: T + 1.5 * HOUR,
  // 14:30 in Singapore, 17:30 in Sydney, 12:00 in Kolkata: not quiet
};

const policy = {
  version: "quiet.1",
  channels: ["push"],
  segments: [],
  default: { name: "everyone", caps: { push: [{ window: "1d", max: 2 }] } },
  defaultZone: "UTC",
  zones: [...ZONES],
  quietHours: { push: [{ from: "21:00", to: "08:00" }] },
};

describe("quiet hours and deferral on the local stack", () => {
  let stack: LocalStack;
  const clock = fixedClock(T);
  const outcomes: ConsumeOutcome[] = [];
  beforeAll(async () => {
    stack = await testStack({ clock, onOutcome: (outcome) => outcomes.push(outcome) });
    const { s3 } = clientsOf(stack);
    const bitmaps = buildSegments(
      ZONES.map((zone, z) => ({ name: zone, userIds: users.slice(z * PER_ZONE, (z + 1) * PER_ZONE) })),
    );
    for (const zone of ZONES)
      await uploadObject(s3, stack.endpoints.bucket, zoneBitmapKey(zone), bitmaps.get(zone) as Uint8Array);
    await uploadRules(stack, policy, {});
  });
  afterAll(async () => {
    await stack.stop();
  });

  /** Receives `count` campaign messages and runs them through the consumer. */
  async function consumeNext(count: number) {
    const messages = await receive(stack, count);
    expect((await invoke(stack, messages)).batchItemFailures).toEqual([]);
  }
  const delivered = async () => (await drainDelivery(stack)).flatMap((message) => message.sends);

  it("delivers outside quiet hours now, defers the rest to the instant each zone's night ends, across the DST change", async () => {
    await sendRaw(
      stack,
      JSON.stringify({ campaignId: "c1", channel: "push", userIds: users, defer: { maxMs: 12 * HOUR } }),
    );
    await consumeNext(1);
    const now = (await delivered()).map((send) => send.userId).sort((a, b) => a - b);
    expect(now).toEqual(users.filter((user) => EXPECTED[zoneOf(user)] === undefined));
    const first = outcomes.at(-1) as Extract<ConsumeOutcome, { kind: "forwarded" }>;
    expect(first.result.held?.zones).toEqual({
      "America/New_York": { quiet: 0, deferred: 100, dropped: 0 },
      "America/Los_Angeles": { quiet: 0, deferred: 100, dropped: 0 },
      "Europe/London": { quiet: 0, deferred: 100, dropped: 0 },
      UTC: { quiet: 0, deferred: 100, dropped: 0 },
    });
    // one message per instant: London and UTC share 08:00 UTC
    expect(await stack.pendingDeferrals()).toEqual([T + 1.5 * HOUR, T + 5.5 * HOUR, T + 8.5 * HOUR]);

    // each instant, and not a millisecond before it
    for (const instant of [T + 1.5 * HOUR, T + 5.5 * HOUR, T + 8.5 * HOUR]) {
      clock.set(instant - 1);
      expect(await stack.fireDeferrals()).toBe(0);
      clock.set(instant);
      expect(await stack.fireDeferrals()).toBe(1);
      await consumeNext(1);
      const sends = await delivered();
      const due = users.filter((user) => EXPECTED[zoneOf(user)] === instant);
      expect(sends.map((send) => send.userId).sort((a, b) => a - b)).toEqual(due);
      expect(sends.every((send) => send.dedupeId === `c1:push:${send.userId}`)).toBe(true);
      const outcome = outcomes.at(-1) as Extract<ConsumeOutcome, { kind: "forwarded" }>;
      expect(outcome.result.at).toBe(instant);
      expect(outcome.result.held).toBeUndefined();
    }
    expect(await stack.pendingDeferrals()).toEqual([]);
  });

  it("counts a deferred message that comes back twice once, with the same dedupe ids", async () => {
    // pinned: 2026-03-09 06:30 UTC, the next night
    const night = T + 24 * HOUR;
    clock.set(night);
    const londoners = users.filter((user) => zoneOf(user) === "Europe/London");
    await sendRaw(
      stack,
      JSON.stringify({ campaignId: "c2", channel: "push", userIds: londoners, defer: { maxMs: 12 * HOUR } }),
    );
    await consumeNext(1);
    expect(await delivered()).toEqual([]);
    clock.set(night + 1.5 * HOUR);
    expect(await stack.fireDeferrals()).toBe(1);
    // the same deferred message consumed twice: never deleted, it comes back once its 1 s visibility ends
    const [message] = await receive(stack, 1, undefined, 1);
    expect((await invoke(stack, [message!], { settle: false })).batchItemFailures).toEqual([]);
    const firstIds = (await delivered()).map((send) => send.dedupeId).sort();
    const again = await receive(stack, 1);
    expect((await invoke(stack, again)).batchItemFailures).toEqual([]);
    const secondIds = (await delivered()).map((send) => send.dedupeId).sort();
    expect(secondIds).toEqual(firstIds);
    expect(firstIds).toHaveLength(PER_ZONE);
    const outcome = outcomes.at(-1) as Extract<ConsumeOutcome, { kind: "forwarded" }>;
    expect(outcome.result.totals.everyone?.duplicate).toBe(PER_ZONE);
    // counted once: push allows 2 a day, c1 (yesterday) is out of the window, so one more campaign passes
    await sendRaw(stack, JSON.stringify({ campaignId: "c3", channel: "push", userIds: londoners }));
    await consumeNext(1);
    expect(await delivered()).toHaveLength(PER_ZONE);
    await sendRaw(stack, JSON.stringify({ campaignId: "c4", channel: "push", userIds: londoners }));
    await consumeNext(1);
    expect(await delivered()).toEqual([]);
  });

  it("drops what would wait past defer.maxMs, and what the campaign does not defer, counting neither", async () => {
    // pinned: 2026-03-10 06:30 UTC
    const night = T + 48 * HOUR;
    clock.set(night);
    const quietUsers = users.filter((user) => EXPECTED[zoneOf(user)] !== undefined);
    await sendRaw(
      stack,
      JSON.stringify({ campaignId: "c5", channel: "push", userIds: quietUsers, defer: { maxMs: 2 * HOUR } }),
    );
    await consumeNext(1);
    const bounded = outcomes.at(-1) as Extract<ConsumeOutcome, { kind: "forwarded" }>;
    expect(bounded.result.held?.zones["Europe/London"]).toEqual({ quiet: 0, deferred: 100, dropped: 0 });
    expect(bounded.result.held?.zones["America/New_York"]).toEqual({ quiet: 0, deferred: 0, dropped: 100 });
    expect(bounded.deferredMessages).toBe(1);
    await sendRaw(stack, JSON.stringify({ campaignId: "c6", channel: "push", userIds: quietUsers }));
    await consumeNext(1);
    const undeferred = outcomes.at(-1) as Extract<ConsumeOutcome, { kind: "forwarded" }>;
    expect(undeferred.result.totals.everyone).toMatchObject({ allowed: 0, quiet: 400 });
    expect(await delivered()).toEqual([]);
  });
});
