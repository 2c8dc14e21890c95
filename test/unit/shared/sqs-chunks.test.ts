// SendMessageBatch limits: at most 10 entries and 1 MiB (bodies and attributes) per call.
import { describe, expect, it } from "vitest";
import { chunkEntries } from "../../../functions/adapters/sqs-sinks.ts";
import { dedupeId, deliveryMessages } from "../../../functions/core/capping/delivery.ts";

describe("delivery batching", () => {
  it("puts at most 10 entries in a call", () => {
    const entries = Array.from({ length: 23 }, (_, i) => ({ Id: String(i), MessageBody: "x" }));
    expect(chunkEntries(entries).map((chunk) => chunk.length)).toEqual([10, 10, 3]);
  });

  it("keeps each call within 1 MiB, attributes included", () => {
    const body = "y".repeat(300_000);
    const entries = Array.from({ length: 4 }, (_, i) => ({
      Id: String(i),
      MessageBody: body,
      MessageAttributes: { campaignId: { DataType: "String", StringValue: "z".repeat(50_000) } },
    }));
    // each entry is 350,000+ bytes: three would pass 1,048,576
    expect(chunkEntries(entries).map((chunk) => chunk.length)).toEqual([2, 2]);
  });

  it("groups forwarded sends into messages of DELIVERY_BATCH_SIZE, each user once, capped ones dropped", () => {
    const decisions = [
      { userId: 1, segment: "new", decision: "allowed" as const },
      { userId: 2, segment: "new", decision: "capped" as const },
      { userId: 3, segment: "rest", decision: "duplicate" as const },
      { userId: 1, segment: "new", decision: "duplicate" as const },
      { userId: 4, segment: "rest", decision: "exempt" as const },
    ];
    const messages = deliveryMessages({ campaignId: "c", channel: "push", payload: { t: 1 } }, decisions, {
      sendsPerMessage: 2,
      maxBodyBytes: 1_048_576,
    });
    expect(messages).toEqual([
      {
        campaignId: "c",
        channel: "push",
        payload: { t: 1 },
        sends: [
          { userId: 1, segment: "new", dedupeId: "c:push:1" },
          { userId: 3, segment: "rest", dedupeId: "c:push:3" },
        ],
      },
      {
        campaignId: "c",
        channel: "push",
        payload: { t: 1 },
        sends: [{ userId: 4, segment: "rest", dedupeId: dedupeId("c", "push", 4) }],
      },
    ]);
  });
});
