// Delivery messages through the pipeline, split by bytes and by count: multi-byte payloads, 10-digit user IDs,
// and a one-send message of exactly the queue's limit.
import type { Message } from "@aws-sdk/client-sqs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import type { DeliveryMessage } from "../../../functions/core/capping/delivery.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { connectCluster } from "../../support/cluster.ts";
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

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

describe("review: delivery split by bytes and count (issue 9 item 7), multi-byte payloads and huge user IDs", () => {
  const LIMIT = 1024;
  const BATCH = 7;
  // segment names of different lengths, so sends differ in size; the largest user IDs have 10 digits
  const names = ["s", "segment-with-a-long-name", "mid"];
  const members: Record<string, number[]> = {
    s: [1, 2 ** 32 - 1, 40],
    "segment-with-a-long-name": [2 ** 32 - 2, 3, 4_000_000_000],
    mid: [5, 123_456_789],
  };
  let stack: LocalStack;
  beforeAll(async () => {
    stack = await testStack({
      deliveryQueueAttributes: { MaximumMessageSize: String(LIMIT) },
      environment: { DELIVERY_BATCH_SIZE: String(BATCH) },
    });
    await uploadRules(
      stack,
      {
        version: "review.delivery.1",
        channels: ["push"],
        segments: names.map((name) => ({ name, bitmap: `segments/${name}.roaring`, caps: {} })),
        default: { name: "rest", caps: { push: [{ window: "1d", max: 1 }] } },
      },
      members,
    );
  });
  afterAll(async () => {
    await stack.stop();
  });
  const run = async (body: unknown) => {
    await sendRaw(stack, JSON.stringify(body));
    return invoke(stack, await receive(stack, 1));
  };

  it("forwards every send once in messages within the limit, each closed only when full or when the next send would not fit", async () => {
    // with 2- and 3-byte UTF-8 characters (sizes are bytes, not characters) the bytes close messages; with no
    // payload the count does
    // users of the default segment (push 1/1d) differ between the two campaigns
    for (const [campaignId, payload, rest] of [
      ["split-utf8", { text: "é中".repeat(100), note: "ü" }, [0, 7, 99, 2 ** 32 - 3, 1_000_000, 4_294_000_000]],
      ["split-count", undefined, [6, 8, 98, 3_000_000_000, 1_000_001, 4_294_000_001]],
    ] as const) {
      const userIds = [...Object.values(members).flat(), ...rest];
      const body = { campaignId, channel: "push", userIds, ...(payload ? { payload } : {}) };
      expect((await run(body)).batchItemFailures).toEqual([]);
      const delivered = await drainRaw(stack, stack.endpoints.deliveryQueueUrl);
      // messages in the batch's order (the queue may hold them in any): each holds a run of consecutive sends
      const position = (message: Message) =>
        userIds.indexOf((JSON.parse(message.Body as string) as DeliveryMessage).sends[0]?.userId as number);
      delivered.sort((a, b) => position(a) - position(b));
      const bodies = delivered.map((m) => JSON.parse(m.Body as string) as DeliveryMessage);
      expect(bodies.flatMap((b) => b.sends.map((s) => s.userId))).toEqual(userIds);
      const sizes = delivered.map(sqsSize);
      for (const [i, message] of bodies.entries()) {
        expect(sizes[i]).toBeLessThanOrEqual(LIMIT);
        expect(message.payload).toEqual(payload);
        expect(message.sends.length).toBeLessThanOrEqual(BATCH);
        // a message with fewer than BATCH sends was closed because the next send would not fit
        const next = bodies[i + 1]?.sends[0];
        if (message.sends.length < BATCH && next) {
          expect((sizes[i] as number) + 1 + Buffer.byteLength(JSON.stringify(next))).toBeGreaterThan(LIMIT);
        }
      }
      const short = bodies.filter((message) => message.sends.length < BATCH).length;
      if (payload) expect(short).toBeGreaterThan(1);
      else expect(bodies.map((message) => message.sends.length)).toEqual([BATCH, BATCH]);
    }
    expect(await drainRaw(stack, stack.endpoints.deadLetterQueueUrl)).toEqual([]);
  });

  it("delivers a one-send message of exactly the limit with a multi-byte payload, and refuses one a byte over before counting", async () => {
    const probe = { campaignId: "edge-a", channel: "push", userIds: [4_294_967_290], payload: "" };
    expect((await run(probe)).batchItemFailures).toEqual([]);
    const [probed] = await drainRaw(stack, stack.endpoints.deliveryQueueUrl);
    const room = LIMIT - sqsSize(probed as Message);
    // room bytes of payload: 3-byte characters, then ASCII for the rest
    const fill = (bytes: number) => "中".repeat(Math.floor(bytes / 3)) + "x".repeat(bytes % 3);
    const atLimit = { ...probe, campaignId: "edge-b", userIds: [4_294_967_291], payload: fill(room) };
    expect((await run(atLimit)).batchItemFailures).toEqual([]);
    expect((await drainRaw(stack, stack.endpoints.deliveryQueueUrl)).map(sqsSize)).toEqual([LIMIT]);
    // one byte more, ending in a 2-byte character; every user here is a 10-digit ID of the default segment
    const overUser = 4_294_967_292;
    const over = { ...probe, campaignId: "edge-c", userIds: [overUser], payload: `${fill(room - 1)}é` };
    expect(Buffer.byteLength(over.payload)).toBe(room + 1);
    expect((await run(over)).batchItemFailures).toEqual([]);
    expect(await drainRaw(stack, stack.endpoints.deliveryQueueUrl)).toEqual([]);
    const dead = await drainRaw(stack, stack.endpoints.deadLetterQueueUrl);
    expect(dead.map((m) => m.MessageAttributes?.path?.StringValue)).toEqual(["payload"]);
    // nothing was counted: under push 1/1d the user is still allowed
    expect((await run({ campaignId: "edge-d", channel: "push", userIds: [overUser] })).batchItemFailures).toEqual([]);
    expect((await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.userId))).toEqual([overUser]);
  });
});
