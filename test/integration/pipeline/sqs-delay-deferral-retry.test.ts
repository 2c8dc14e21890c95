// The SQS-delay deferral path when a batch is retried: the retry sends its deferred messages to the campaign
// queue again (a standard queue cannot deduplicate), under the same names; re-decided at their instant, the
// copies count each send once, and the sends forwarded twice carry the same dedupe ids.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqsDelayDeferrals } from "../../../functions/adapters/deferral-schedulers.ts";
import type { CampaignBatch } from "../../../functions/core/capping/campaign-batch.ts";
import type { ConsumeOutcome } from "../../../functions/core/capping/campaign-consumer.ts";
import { deferralMessages } from "../../../functions/core/capping/deferral.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { drainDelivery, invoke, receive, sendRaw, testStack, uploadRules } from "../../support/pipeline.ts";

const HOUR = 3_600_000;
// pinned: 2026-03-09 07:50 UTC, ten minutes before quiet hours end in the default zone (UTC)
const T = 1_773_042_600_000;
const END = T + 10 * 60_000;
const users = Array.from({ length: 50 }, (_, i) => i);

const policy = {
  version: "quiet-sqs.1",
  channels: ["push"],
  segments: [],
  default: { name: "everyone", caps: { push: [{ window: "1d", max: 1 }] } },
  defaultZone: "UTC",
  zones: [],
  quietHours: { push: [{ from: "21:00", to: "08:00" }] },
};

describe("a retried batch on the SQS-delay deferral path", () => {
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

  it("schedules the same names twice, and the copies count each send once under the same dedupe ids", async () => {
    const batch: CampaignBatch = { campaignId: "c-sqs", channel: "push", userIds: users, defer: { maxMs: HOUR } };
    const body = JSON.stringify(batch);
    // the first attempt: decided while quiet, every send held to 08:00 UTC
    await sendRaw(stack, body);
    const [message] = await receive(stack, 1);
    const attempts = [];
    for (const now of [T, T + 30_000]) {
      clock.set(now);
      expect((await invoke(stack, [message!], { settle: now !== T })).batchItemFailures).toEqual([]);
      const outcome = outcomes.at(-1) as Extract<ConsumeOutcome, { kind: "forwarded" }>;
      expect(outcome.result.held?.deferred).toEqual([{ eligibleAt: END, userIds: users }]);
      attempts.push(deferralMessages(batch, outcome.result));
    }
    expect(await drainDelivery(stack)).toEqual([]);
    // the retry's deferral carries its own since and the first attempt's name
    const [first, retry] = attempts.map((deferrals) => deferrals[0]!);
    expect(retry!.name).toBe(first!.name);
    expect(JSON.parse(retry!.body).defer.since).toBe(T + 30_000);

    // what each attempt hands the SQS-delay path (measured from the instant: no delay left to wait for)
    const sqsDelay = new SqsDelayDeferrals(stack.sqs, stack.endpoints.campaignQueueUrl);
    for (const deferrals of attempts) await sqsDelay.schedule(deferrals, END);
    const copies = await receive(stack, 2);
    expect(copies.map((copy) => copy.Body)).toEqual([first!.body, retry!.body]);

    clock.set(END);
    const dedupeIds: string[][] = [];
    for (const copy of copies) {
      expect((await invoke(stack, [copy])).batchItemFailures).toEqual([]);
      const sends = (await drainDelivery(stack)).flatMap((delivery) => delivery.sends);
      dedupeIds.push(sends.map((send) => send.dedupeId).sort());
    }
    // the copy re-decided second finds its sends already made: duplicates, forwarded under the same dedupe ids
    const expected = users.map((user) => `c-sqs:push:${user}`).sort();
    expect(dedupeIds).toEqual([expected, expected]);
    const totals = (outcomes.slice(-2) as Extract<ConsumeOutcome, { kind: "forwarded" }>[]).map(
      (outcome) => outcome.result.totals.everyone,
    );
    expect(totals.map((total) => [total?.allowed, total?.duplicate])).toEqual([
      [users.length, 0],
      [0, users.length],
    ]);
    // counted once: push allows 1 a day, so the next campaign is capped for every user
    await sendRaw(stack, JSON.stringify({ campaignId: "c-next", channel: "push", userIds: users }));
    expect((await invoke(stack, await receive(stack, 1))).batchItemFailures).toEqual([]);
    expect(await drainDelivery(stack)).toEqual([]);
  });
});
