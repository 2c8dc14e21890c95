// Deferral of capped sends end to end on the local stack, the functions' clock pinned: a campaign whose
// sends are capped comes back through the local scheduler at the instant the cap admits them again, is
// delivered then under its own dedupe ids, and is counted once however often the deferred message arrives.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ConsumeOutcome } from "../../../functions/core/capping/campaign-consumer.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { drainDelivery, invoke, receive, sendRaw, testStack, uploadRules } from "../../support/pipeline.ts";

const HOUR = 3_600_000;
// pinned: the stack's clock, 2026-11-02 09:00 UTC
const T = Date.UTC(2026, 10, 2, 9);
const users = Array.from({ length: 300 }, (_, i) => i);

const policy = {
  version: "capped-defer.1",
  channels: ["push"],
  segments: [],
  default: { name: "everyone", caps: { push: [{ window: "1h", max: 1 }] } },
};

describe("capped sends deferred on the local stack", () => {
  let stack: LocalStack;
  const clock = fixedClock(T);
  const outcomes: ConsumeOutcome[] = [];
  beforeAll(async () => {
    stack = await testStack({ clock, onOutcome: (outcome) => outcomes.push(outcome) });
    await uploadRules(stack, policy, {});
  });
  afterAll(async () => {
    await stack.stop();
  });

  async function consumeNext(count: number) {
    const messages = await receive(stack, count);
    expect((await invoke(stack, messages)).batchItemFailures).toEqual([]);
  }
  const delivered = async () => (await drainDelivery(stack)).flatMap((message) => message.sends);
  const last = () => outcomes.at(-1) as Extract<ConsumeOutcome, { kind: "forwarded" }>;

  it("defers a capped campaign to when the cap admits it, and delivers it then, once", async () => {
    await sendRaw(stack, JSON.stringify({ campaignId: "first", channel: "push", userIds: users }));
    await consumeNext(1);
    expect(await delivered()).toHaveLength(users.length);
    // 20 minutes later a second campaign: every user capped until the first send leaves the 1h window
    clock.set(T + HOUR / 3);
    await sendRaw(
      stack,
      JSON.stringify({ campaignId: "second", channel: "push", userIds: users, defer: { maxMs: 2 * HOUR } }),
    );
    await consumeNext(1);
    expect(await delivered()).toEqual([]);
    expect(last().result.totals.everyone).toMatchObject({ allowed: 0, deferred: 300, deferredBy: { "push:1h": 300 } });
    expect(last().deferredMessages).toBe(1);
    // beyond SQS' 15 minutes: the local scheduler holds it
    expect(await stack.pendingDeferrals()).toEqual([T + HOUR]);
    clock.set(T + HOUR - 1);
    expect(await stack.fireDeferrals()).toBe(0);
    clock.set(T + HOUR);
    expect(await stack.fireDeferrals()).toBe(1);
    // consumed twice (never deleted the first time): delivered under the same dedupe ids, counted once
    const [message] = await receive(stack, 1, undefined, 1);
    expect((await invoke(stack, [message!], { settle: false })).batchItemFailures).toEqual([]);
    const sends = await delivered();
    expect(sends.map((send) => send.userId).sort((a, b) => a - b)).toEqual(users);
    expect(sends.every((send) => send.dedupeId === `second:push:${send.userId}`)).toBe(true);
    expect(last().result.at).toBe(T + HOUR);
    await consumeNext(1);
    expect(last().result.totals.everyone).toMatchObject({ allowed: 0, duplicate: 300 });
    expect(await stack.pendingDeferrals()).toEqual([]);
    // counted once: a third campaign now is capped (and, without defer, dropped)
    await sendRaw(stack, JSON.stringify({ campaignId: "third", channel: "push", userIds: users }));
    await consumeNext(1);
    expect(last().result.totals.everyone).toMatchObject({ allowed: 0, capped: 300 });
  });
});
