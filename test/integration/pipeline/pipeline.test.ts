// The campaign pipeline with real parts: fauxqs (S3 + SQS) through the real AWS SDK clients, the real
// Redis Cluster, the real handler driven by SQS events.
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import type { Message } from "@aws-sdk/client-sqs";
import type { SQSBatchResponse } from "aws-lambda";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pushCampaign } from "../../../functions/app/operator-actions.ts";
import type { CampaignConsumer } from "../../../functions/core/capping/campaign-consumer.ts";
import type { DeliveryMessage } from "../../../functions/core/capping/delivery.ts";
import { StoreReplyError } from "../../../functions/core/shared/errors.ts";
import { makeCampaignConsumerHandler } from "../../../functions/handlers/campaign-consumer-handler.ts";
import { lambdaContext, toSqsEvent } from "../../../scripts/local/sqs-poller.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { capTagOf } from "../../../sdk/src/protocol/index.ts";
import {
  drainDelivery,
  drainRaw,
  invoke,
  receive,
  sendRaw,
  sqsSize,
  testStack,
  uploadRules,
} from "../../support/pipeline.ts";

const policy = {
  version: "pipeline.1",
  channels: ["email", "push"],
  segments: [{ name: "new", bitmap: "segments/new.roaring", caps: { push: [{ window: "1d", max: 1 }] } }],
  default: { name: "unsegmented", caps: { "*": [{ window: "7d", max: 2 }] } },
};
const newUsers = Array.from({ length: 1000 }, (_, i) => i);
const users = Array.from({ length: 3000 }, (_, i) => i);

describe("campaign pipeline", () => {
  let stack: LocalStack;
  beforeAll(async () => {
    stack = await testStack({ environment: { DELIVERY_BATCH_SIZE: "100" } });
    await uploadRules(stack, policy, { new: newUsers });
  });
  afterAll(async () => {
    await stack.stop();
  });

  it("forwards exactly the approved sends, with segments and dedupe ids; a second campaign is capped by policy", async () => {
    stack.poller.start();
    try {
      await pushCampaign(stack.sqs, stack.endpoints.campaignQueueUrl, {
        campaignId: "c1",
        channel: "push",
        userIds: users,
        usersPerMessage: 700,
      });
      await stack.poller.drained();
      const first = await drainDelivery(stack);
      const sends = first.flatMap((m) => m.sends);
      expect(sends).toHaveLength(3000);
      expect(new Set(sends.map((s) => s.userId))).toEqual(new Set(users));
      for (const send of sends) {
        expect(send.segment).toBe(send.userId < 1000 ? "new" : "unsegmented");
        expect(send.dedupeId).toBe(`c1:push:${send.userId}`);
      }
      expect(first.every((m) => m.sends.length <= 100 && m.campaignId === "c1" && m.channel === "push")).toBe(true);

      await pushCampaign(stack.sqs, stack.endpoints.campaignQueueUrl, {
        campaignId: "c2",
        channel: "push",
        userIds: users,
        usersPerMessage: 700,
      });
      await stack.poller.drained();
      const second = (await drainDelivery(stack)).flatMap((m) => m.sends);
      // "new" users hit push 1/1d; the others have room in "*" 2/7d
      expect(second.map((s) => s.userId).sort((a, b) => a - b)).toEqual(users.slice(1000));
      expect(stack.poller.stats.failedRecords).toBe(0);
    } finally {
      await stack.poller.stop();
    }
  });

  it("counts a redelivered message once and forwards the same dedupe ids", async () => {
    const userIds = Array.from({ length: 50 }, (_, i) => 5000 + i);
    await sendRaw(stack, JSON.stringify({ campaignId: "r1", channel: "email", userIds }));
    // first delivery: processed, but never deleted (as if the function died after its work)
    const [message] = await receive(stack, 1, undefined, 1);
    expect((await invoke(stack, [message!], { settle: false })).batchItemFailures).toEqual([]);
    const firstIds = (await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.dedupeId));
    // the visibility timeout expires and the same message comes back
    const [again] = await receive(stack, 1);
    expect(again!.MessageId).toBe(message!.MessageId);
    expect(again!.Attributes?.ApproximateReceiveCount).toBe("2");
    expect((await invoke(stack, [again!])).batchItemFailures).toEqual([]);
    const secondIds = (await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.dedupeId));
    expect(secondIds.sort()).toEqual(firstIds.sort());
    // counted once: "*" allows 2 a week, so one more campaign passes and the next is capped
    await sendRaw(stack, JSON.stringify({ campaignId: "r2", channel: "email", userIds }));
    await sendRaw(stack, JSON.stringify({ campaignId: "r3", channel: "email", userIds }));
    const two = await receive(stack, 2);
    expect((await invoke(stack, two)).batchItemFailures).toEqual([]);
    const forwarded = (await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.dedupeId.split(":")[0]));
    expect(forwarded).toHaveLength(50);
    expect(new Set(forwarded).size).toBe(1);
  });

  it("sends poison messages to the DLQ with their reason and completes the rest of the batch", async () => {
    const bodies = [
      "{ not json",
      JSON.stringify({ campaignId: "p1", channel: "push", userIds: "1,2,3" }),
      JSON.stringify({ campaignId: "p1", channel: "fax", userIds: [1] }),
      JSON.stringify({ campaignId: "p1", channel: "push", userIds: [1, 4_294_967_296] }),
      JSON.stringify({ campaignId: "good", channel: "email", userIds: [7001, 7002] }),
    ];
    for (const body of bodies) await sendRaw(stack, body);
    const messages = await receive(stack, bodies.length);
    expect((await invoke(stack, messages)).batchItemFailures).toEqual([]);
    const dead = await receive(stack, 4, stack.endpoints.deadLetterQueueUrl);
    const reasons = dead.map((m) => m.MessageAttributes?.reason?.StringValue ?? "").sort();
    expect(reasons).toEqual([
      expect.stringMatching(/^body: not valid JSON/),
      'channel: unknown channel "fax" (policy has email, push)',
      "userIds: expected an array of user IDs",
      "userIds[1]: expected a user ID: an integer from 0 to 4294967295",
    ]);
    expect(new Set(dead.map((m) => m.Body))).toEqual(new Set(bodies.slice(0, 4)));
    expect((await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.userId))).toEqual([7001, 7002]);
  });

  it("dead-letters a message whose reason quotes a character SQS refuses in an attribute, with U+FFFD in its place", async () => {
    const body = JSON.stringify({ campaignId: "p2", channel: "@", userIds: [1] }).replace("@", "x\\uffff");
    await sendRaw(stack, body);
    expect((await invoke(stack, await receive(stack, 1))).batchItemFailures).toEqual([]);
    const dead = (await drainRaw(stack, stack.endpoints.deadLetterQueueUrl)).filter((m) => m.Body === body);
    expect(dead).toHaveLength(1);
    expect(dead[0]?.MessageAttributes?.reason?.StringValue).toBe(
      'channel: unknown channel "x\ufffd" (policy has email, push)',
    );
  });

  it("dead-letters a campaign message near 1 MiB whose delivery cannot fit: its whole body, and the attributes that fit", async () => {
    const MiB = 1_048_576;
    const sized = (campaignId: string, bytes: number) => {
      const base = JSON.stringify({ campaignId, channel: "push", userIds: [1], payload: "" });
      return JSON.stringify({ campaignId, channel: "push", userIds: [1], payload: "x".repeat(bytes - base.length) });
    };
    // 16 bytes left: no attribute fits; 90 left: the error, and the reason cut short (its delivery message,
    // the body plus ~100 bytes of sends and attributes, still cannot fit)
    const full = sized("near-full", MiB - 16);
    const roomy = sized("near-roomy", MiB - 90);
    expect(Buffer.byteLength(full)).toBe(MiB - 16);
    await sendRaw(stack, full);
    await sendRaw(stack, roomy);
    expect((await invoke(stack, await receive(stack, 2))).batchItemFailures).toEqual([]);
    const dead = await drainRaw(stack, stack.endpoints.deadLetterQueueUrl);
    const fullDead = dead.find((m) => m.Body === full);
    const roomyDead = dead.find((m) => m.Body === roomy);
    expect(fullDead?.MessageAttributes ?? {}).toEqual({});
    expect(roomyDead?.MessageAttributes?.error?.StringValue).toBe("ValidationError");
    expect(roomyDead?.MessageAttributes?.reason?.StringValue).toMatch(/^payload: too large to deliver: .*…$/);
    expect(sqsSize(roomyDead as Message)).toBeLessThanOrEqual(MiB);
    expect(await drainDelivery(stack)).toEqual([]);
  });
});

describe("a delivery queue with a 1 KiB MaximumMessageSize", () => {
  const LIMIT = 1024;
  let stack: LocalStack;
  beforeAll(async () => {
    // the local stack tells the consumer the queue's limit, as infra/functions.ts does
    stack = await testStack({
      deliveryQueueAttributes: { MaximumMessageSize: String(LIMIT) },
      environment: { DELIVERY_BATCH_SIZE: "100" },
    });
    await uploadRules(stack, policy, { new: newUsers });
  });
  afterAll(async () => {
    await stack.stop();
  });

  /** Sends these bodies, invokes the consumer with them as one event, and returns its response. */
  const run = async (...bodies: unknown[]) => {
    for (const body of bodies) await sendRaw(stack, JSON.stringify(body));
    return invoke(stack, await receive(stack, bodies.length));
  };

  it("splits a delivery larger than one SQS message by bytes", async () => {
    const userIds = Array.from({ length: 20 }, (_, i) => 100 + i);
    // one message of 100 sends would be ~1.5 KB: over the limit, so it must be split by bytes
    const response = await run({ campaignId: "split", channel: "push", userIds, payload: { html: "x".repeat(500) } });
    expect(response.batchItemFailures).toEqual([]);
    const delivered = await drainRaw(stack, stack.endpoints.deliveryQueueUrl);
    expect(delivered.length).toBeGreaterThan(1);
    for (const message of delivered) expect(sqsSize(message)).toBeLessThanOrEqual(LIMIT);
    const sends = delivered.flatMap((m) => (JSON.parse(m.Body as string) as DeliveryMessage).sends);
    expect(sends.map((s) => s.userId).sort((a, b) => a - b)).toEqual(userIds);
    expect(await drainRaw(stack, stack.endpoints.deadLetterQueueUrl)).toEqual([]);
  });

  it("refuses before counting a send whose delivery can never fit, with its reason in the DLQ", async () => {
    const userIds = Array.from({ length: 10 }, (_, i) => 200 + i);
    const body = { campaignId: "big", channel: "push", userIds, payload: { html: "x".repeat(1200) } };
    // the record succeeds: it is dead-lettered by the consumer, not retried
    expect((await run(body)).batchItemFailures).toEqual([]);
    const [dead, ...more] = await drainRaw(stack, stack.endpoints.deadLetterQueueUrl);
    expect(more).toEqual([]);
    expect(dead?.Body).toBe(JSON.stringify(body));
    expect(dead?.MessageAttributes?.reason?.StringValue).toMatch(
      /^payload: too large to deliver: the delivery message of one send \(user 209, segment "new"\) has a \d+-byte body, the delivery queue takes at most \d+; nothing was counted$/,
    );
    expect(dead?.MessageAttributes?.path?.StringValue).toBe("payload");
    expect(dead?.MessageAttributes?.error?.StringValue).toBe("ValidationError");
    expect(await drainRaw(stack, stack.endpoints.deliveryQueueUrl)).toEqual([]);
    // nothing was counted: the same users under push 1/1d are all allowed by the next campaign
    expect((await run({ campaignId: "small", channel: "push", userIds })).batchItemFailures).toEqual([]);
    const sends = (await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.userId));
    expect(sends.sort((a, b) => a - b)).toEqual(userIds);
  });

  it("delivers a send whose message is exactly the queue's limit and refuses one a byte larger", async () => {
    // the size of a one-send message with an empty payload, read off the queue (same ID and user lengths below)
    expect(
      (await run({ campaignId: "edge-0", channel: "push", userIds: [300], payload: "" })).batchItemFailures,
    ).toEqual([]);
    const [probe] = await drainRaw(stack, stack.endpoints.deliveryQueueUrl);
    const room = LIMIT - sqsSize(probe as Message);
    expect(room).toBeGreaterThan(0);
    // what the message carries besides its body (the campaignId and channel attributes)
    const attributeBytes = sqsSize(probe as Message) - Buffer.byteLength(probe?.Body as string);

    const atLimit = { campaignId: "edge-1", channel: "push", userIds: [301], payload: "x".repeat(room) };
    const over = { campaignId: "edge-2", channel: "push", userIds: [302], payload: "x".repeat(room + 1) };
    expect((await run(atLimit, over)).batchItemFailures).toEqual([]);
    const delivered = await drainRaw(stack, stack.endpoints.deliveryQueueUrl);
    expect(delivered.map(sqsSize)).toEqual([LIMIT]);
    expect((JSON.parse(delivered[0]?.Body as string) as DeliveryMessage).sends.map((s) => s.userId)).toEqual([301]);
    const dead = await drainRaw(stack, stack.endpoints.deadLetterQueueUrl);
    expect(dead.map((m) => m.Body)).toEqual([JSON.stringify(over)]);
    expect(dead[0]?.MessageAttributes?.reason?.StringValue).toContain(
      `has a ${LIMIT + 1 - attributeBytes}-byte body, the delivery queue takes at most ${LIMIT - attributeBytes};`,
    );
    // user 302 was not counted: a smaller message for it is forwarded under push 1/1d
    expect((await run({ ...over, campaignId: "edge-3", payload: "" })).batchItemFailures).toEqual([]);
    expect((await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.userId))).toEqual([302]);
  });

  it("forwards a payload holding U+FFFF, which SQS refuses raw in a body, escaped", async () => {
    // the campaign message carries it escaped (SQS takes that); JSON.parse turns it into the character,
    // which JSON.stringify would leave raw
    const body = JSON.stringify({ campaignId: "ffff", channel: "push", userIds: [400, 401], payload: "@" });
    const id = await sendRaw(stack, body.replace("@", "a\\uffffb\\ufffe"));
    const response = await invoke(stack, await receive(stack, 1));
    expect(response.batchItemFailures).toEqual([]);
    expect(id).toBeDefined();
    const delivered = await drainRaw(stack, stack.endpoints.deliveryQueueUrl);
    expect(delivered).toHaveLength(1);
    const message = JSON.parse(delivered[0]?.Body as string) as DeliveryMessage;
    expect(message.payload).toBe("a\uffffb\ufffe");
    expect(message.sends.map((s) => s.userId)).toEqual([400, 401]);
  });
});

describe("a delivery queue smaller than the consumer was told", () => {
  let stack: LocalStack;
  beforeAll(async () => {
    // a misconfiguration: the queue takes 1 KiB, the consumer believes 2 KiB; SQS refuses (per entry,
    // SenderFault) the messages between the two
    stack = await testStack({
      deliveryQueueAttributes: { MaximumMessageSize: "1024" },
      environment: { DELIVERY_BATCH_SIZE: "5", DELIVERY_MAX_MESSAGE_BYTES: "2048" },
    });
    await uploadRules(stack, policy, { new: newUsers });
  });
  afterAll(async () => {
    await stack.stop();
  });

  it("fails exactly the records whose sends the queue refused, and loses nothing", async () => {
    const small = Array.from({ length: 10 }, (_, i) => 8000 + i);
    const large = Array.from({ length: 10 }, (_, i) => 9000 + i);
    const okId = await sendRaw(stack, JSON.stringify({ campaignId: "ok", channel: "push", userIds: small }));
    const bigId = await sendRaw(
      stack,
      JSON.stringify({ campaignId: "big", channel: "push", userIds: large, payload: { html: "x".repeat(1200) } }),
    );
    const messages = await receive(stack, 2, undefined, 1);
    const response = await invoke(stack, messages);
    expect(response.batchItemFailures).toEqual([{ itemIdentifier: bigId }]);
    expect(okId).not.toBe(bigId);
    // the accepted record's users were forwarded; the refused record is back on the queue for a retry
    expect((await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.userId)).sort()).toEqual(small);
    const [retried] = await receive(stack, 1);
    expect(retried?.MessageId).toBe(bigId);
    expect(await drainRaw(stack, stack.endpoints.deadLetterQueueUrl)).toEqual([]);
    expect(await drainRaw(stack, stack.endpoints.deliveryQueueUrl)).toEqual([]);
  });
});

describe("the time budget and waves of records", () => {
  let stack: LocalStack;
  beforeAll(async () => {
    stack = await testStack({ environment: { TIME_BUDGET_MARGIN_MS: "15000", RECORDS_IN_FLIGHT: "1" } });
    await uploadRules(stack, policy, { new: newUsers });
  });
  afterAll(async () => {
    await stack.stop();
  });

  /** A handler over the stack's consumer that notes each record's clock reading and how many ran at once. */
  function observedHandler(recordsInFlight: number, readings: number[]) {
    const seen: { now: number | undefined; inFlight: number }[] = [];
    let inFlight = 0;
    const real = stack.consumer.consumer;
    const consumer = Object.create(real) as CampaignConsumer;
    consumer.consume = async (body, messageId, now) => {
      seen.push({ now, inFlight: ++inFlight });
      try {
        return await real.consume(body, messageId, now);
      } finally {
        inFlight--;
      }
    };
    const handler = makeCampaignConsumerHandler({
      consumer,
      logger: new Logger({ logLevel: "SILENT" }),
      metrics: new Metrics({ namespace: "Tollgate" }),
      timeBudgetMarginMs: 15_000,
      maxReceiveCount: 5,
      recordsInFlight,
      clock: { now: () => readings.shift() ?? Number.NaN },
    });
    return { handler, seen };
  }

  it("answers each of two invocations at once with its own failed records", async () => {
    // regression: one batch processor served every invocation of a handler, and an invocation starting cleared
    // the failures of one under way, which then answered its failed record as processed: the poller deleted it
    for (const [i, campaignId] of ["b1", "b2", "a"].entries())
      await sendRaw(stack, JSON.stringify({ campaignId, channel: "push", userIds: [22_000 + i] }));
    const messages = await receive(stack, 3);
    const byCampaign = new Map(
      messages.map((m) => [(JSON.parse(m.Body as string) as { campaignId: string }).campaignId, m]),
    );
    const real = stack.consumer.consumer;
    const consumer = Object.create(real) as CampaignConsumer;
    let release = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    consumer.consume = async (body, messageId, now) => {
      const { campaignId } = JSON.parse(body) as { campaignId: string };
      if (campaignId === "b1") throw new StoreReplyError("cap-sends", "ERR injected");
      if (campaignId === "b2") await gate;
      return real.consume(body, messageId, now);
    };
    const handler = makeCampaignConsumerHandler({
      consumer,
      logger: new Logger({ logLevel: "SILENT" }),
      metrics: new Metrics({ namespace: "Tollgate" }),
      timeBudgetMarginMs: 15_000,
      maxReceiveCount: 5,
      recordsInFlight: 2,
    });
    const eventOf = (...campaigns: string[]) =>
      toSqsEvent(
        campaigns.map((c) => byCampaign.get(c) as Message),
        "arn:aws:sqs:us-east-1:000000000000:campaign",
        "us-east-1",
      );
    // b1 fails at once while b2 waits; a whole invocation runs meanwhile; then b2 is let through
    const first = handler(eventOf("b1", "b2"), lambdaContext(60_000)) as Promise<SQSBatchResponse>;
    await new Promise((resolve) => setTimeout(resolve, 50));
    const second = (await handler(eventOf("a"), lambdaContext(60_000))) as SQSBatchResponse;
    release();
    expect(second.batchItemFailures).toEqual([]);
    expect((await first).batchItemFailures).toEqual([{ itemIdentifier: byCampaign.get("b1")?.MessageId }]);
    expect((await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.dedupeId)).sort()).toEqual([
      "a:push:22002",
      "b2:push:22001",
    ]);
  });

  it("reports the records it cannot start in time as failures instead of timing out the whole batch", async () => {
    for (let i = 0; i < 3; i++)
      await sendRaw(stack, JSON.stringify({ campaignId: `t${i}`, channel: "push", userIds: [20_000 + i] }));
    const messages = await receive(stack, 3);
    // one record a wave: the first starts with a minute left; by the second only 10 s remain, under the 15 s margin
    const remaining = [60_000, 10_000, 9_000];
    const context = { ...lambdaContext(60_000), getRemainingTimeInMillis: () => remaining.shift() ?? 0 };
    const event = toSqsEvent(messages, "arn:aws:sqs:us-east-1:000000000000:campaign", "us-east-1");
    const response = (await stack.consumer.handler(event, context)) as SQSBatchResponse;
    expect(response.batchItemFailures.map((f) => f.itemIdentifier)).toEqual(messages.slice(1).map((m) => m.MessageId));
    expect((await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.dedupeId))).toEqual(["t0:push:20000"]);
  });

  it("decides a wave's records together with one clock reading, and starts the next wave only when it has settled", async () => {
    for (let i = 0; i < 5; i++)
      await sendRaw(
        stack,
        JSON.stringify({ campaignId: "w", channel: "push", userIds: [21_000 + 10 * i, 21_001 + 10 * i] }),
      );
    const messages = await receive(stack, 5);
    const now = Date.now();
    const { handler, seen } = observedHandler(2, [now, now + 1, now + 2]);
    const event = toSqsEvent(messages, "arn:aws:sqs:us-east-1:000000000000:campaign", "us-east-1");
    const response = (await handler(event, lambdaContext(60_000))) as SQSBatchResponse;
    expect(response.batchItemFailures).toEqual([]);
    expect(seen.map((s) => s.now)).toEqual([now, now, now + 1, now + 1, now + 2]);
    expect(Math.max(...seen.map((s) => s.inFlight))).toBe(2);
    const forwarded = (await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.userId));
    expect(forwarded.sort((a, b) => a - b)).toEqual(
      Array.from({ length: 5 }, (_, i) => [21_000 + 10 * i, 21_001 + 10 * i]).flat(),
    );
  });

  it("shares script calls between a wave's records of one campaign: one call per tag, not one per record and tag", async () => {
    // 10 records of 150 sparse users each, disjoint (a fixed linear congruential sequence in 0..2^31)
    let seed = 12_345;
    const records = Array.from({ length: 10 }, () =>
      Array.from({ length: 150 }, () => {
        seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
        return seed;
      }),
    );
    expect(new Set(records.flat()).size).toBe(1_500);
    for (const userIds of records)
      await sendRaw(stack, JSON.stringify({ campaignId: "shared", channel: "push", userIds }));
    const messages = await receive(stack, 10);
    const scriptCalls = async () => {
      let calls = 0;
      for (const node of stack.consumer.cluster.nodes("master")) {
        const stats = await node.info("commandstats");
        for (const match of stats.matchAll(/cmdstat_(?:evalsha|eval|fcall):calls=(\d+)/g)) calls += Number(match[1]);
      }
      return calls;
    };
    const { handler } = observedHandler(10, [Date.now()]);
    const before = await scriptCalls();
    const event = toSqsEvent(messages, "arn:aws:sqs:us-east-1:000000000000:campaign", "us-east-1");
    expect(((await handler(event, lambdaContext(60_000))) as SQSBatchResponse).batchItemFailures).toEqual([]);
    const calls = (await scriptCalls()) - before;
    const tags = (ids: readonly number[]) => new Set(ids.map(capTagOf)).size;
    // test files run one at a time, so the cluster's script calls are this invocation's
    expect(calls).toBe(tags(records.flat()));
    expect(calls).toBeLessThan(records.reduce((sum, ids) => sum + tags(ids), 0));
    expect((await drainDelivery(stack)).flatMap((m) => m.sends).length).toBe(1_500);
  });

  it("checks the time budget once a wave: a wave started in time runs whole, the next is deferred", async () => {
    for (let i = 0; i < 3; i++)
      await sendRaw(stack, JSON.stringify({ campaignId: `b${i}`, channel: "push", userIds: [22_000 + i] }));
    const messages = await receive(stack, 3);
    const { handler } = observedHandler(2, [Date.now(), Date.now()]);
    const remaining = [60_000, 10_000];
    const context = { ...lambdaContext(60_000), getRemainingTimeInMillis: () => remaining.shift() ?? 0 };
    const event = toSqsEvent(messages, "arn:aws:sqs:us-east-1:000000000000:campaign", "us-east-1");
    const response = (await handler(event, context)) as SQSBatchResponse;
    expect(response.batchItemFailures.map((f) => f.itemIdentifier)).toEqual([messages[2]?.MessageId]);
    const forwarded = (await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.userId));
    expect(forwarded.sort((a, b) => a - b)).toEqual([22_000, 22_001]);
  });
});
