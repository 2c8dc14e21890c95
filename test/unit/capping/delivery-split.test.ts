// Delivery messages split by count and by bytes, against a reference built with JSON.stringify itself (and
// SQS's refused U+FFFE/U+FFFF escaped):
// every message within both limits, no message closed early, no send lost, reordered or repeated; and the
// refusal before counting fires exactly when one send's message alone cannot fit.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { PlannedSends } from "../../../functions/core/capping/capper.ts";
import type { CapDecision } from "../../../functions/core/capping/decisions.ts";
import {
  type DeliveryBatch,
  type DeliveryMessage,
  type DeliverySend,
  DeliverySizer,
  dedupeId,
  deliveryBody,
  deliveryMessages,
  refuseUndeliverable,
} from "../../../functions/core/capping/delivery.ts";
import { ValidationError } from "../../../functions/core/shared/errors.ts";

/** The body as SQS must get it: JSON, with the two characters SQS refuses (and JSON leaves raw) escaped. */
const body = (message: DeliveryMessage) =>
  JSON.stringify(message).replace(/[\uFFFE\uFFFF]/g, (c) => `\\u${c.charCodeAt(0).toString(16)}`);
const bytes = (message: DeliveryMessage) => Buffer.byteLength(body(message), "utf8");
const messageOf = (batch: DeliveryBatch, sends: DeliverySend[]): DeliveryMessage => ({
  campaignId: batch.campaignId,
  channel: batch.channel,
  sends,
  ...(batch.payload === undefined ? {} : { payload: batch.payload }),
});
const sendOf = (batch: DeliveryBatch, userId: number, segment: string): DeliverySend => ({
  userId,
  segment,
  dedupeId: dedupeId(batch.campaignId, batch.channel, userId),
});

// names with characters JSON escapes (quote, backslash, control) and multi-byte UTF-8
const text = fc.string({
  unit: fc.constantFrom("a", "Z", "9", '"', "\\", "\n", "é", "€", "😀", ":", "\uFFFF", "\uFFFE"),
  maxLength: 12,
});
const batchArbitrary = fc.record(
  {
    campaignId: text.filter((s) => s.length > 0),
    channel: text.filter((s) => s.length > 0),
    payload: fc.option(fc.jsonValue({ maxDepth: 2 }), { nil: undefined }),
  },
  { requiredKeys: ["campaignId", "channel"] },
);
const decisionsArbitrary = fc.array(
  fc.record({
    userId: fc.oneof(fc.integer({ min: 0, max: 20 }), fc.integer({ min: 0, max: 4_294_967_295 })),
    segment: fc.constantFrom("new", "é-vip", 'q"uote', "rest"),
    decision: fc.constantFrom("allowed", "capped", "duplicate", "exempt") as fc.Arbitrary<CapDecision["decision"]>,
  }),
  { maxLength: 60 },
);

describe("delivery messages split by count and bytes", () => {
  it("the sizer's figure is the byte length of the message JSON, for any names, payload and user ID", () => {
    fc.assert(
      fc.property(batchArbitrary, decisionsArbitrary, (batch, decisions) => {
        const sizer = new DeliverySizer(batch);
        expect(sizer.envelopeBytes).toBe(bytes(messageOf(batch, [])));
        for (const { userId, segment } of decisions) {
          expect(sizer.singleSendBytes(userId, segment)).toBe(
            bytes(messageOf(batch, [sendOf(batch, userId, segment)])),
          );
        }
      }),
      { numRuns: 200 },
    );
  });

  it("keeps every message within both limits, closes none early, and forwards each uncapped user once, in order", () => {
    fc.assert(
      fc.property(
        batchArbitrary,
        decisionsArbitrary,
        fc.integer({ min: 1, max: 12 }),
        fc.integer({ min: 0, max: 400 }),
        (batch, decisions, sendsPerMessage, slack) => {
          const sizer = new DeliverySizer(batch);
          const expected: DeliverySend[] = [];
          const seen = new Set<number>();
          for (const { userId, segment, decision } of decisions) {
            if (decision === "capped" || seen.has(userId)) continue;
            seen.add(userId);
            expected.push(sendOf(batch, userId, segment));
          }
          // the largest single-send message fits exactly with slack 0: the boundary is exercised
          const largest = Math.max(
            sizer.envelopeBytes,
            ...expected.map((s) => sizer.singleSendBytes(s.userId, s.segment)),
          );
          const maxBodyBytes = largest + slack;
          const messages = deliveryMessages(batch, decisions, { sendsPerMessage, maxBodyBytes });
          expect(messages.flatMap((m) => m.sends)).toEqual(expected);
          messages.forEach((message, i) => {
            expect(deliveryBody(message)).toBe(body(message));
            expect(deliveryBody(message)).not.toMatch(/[\uFFFE\uFFFF]/);
            // what the delivery side parses is what JSON would have given it (-0 comes back as 0 either way)
            expect(JSON.parse(deliveryBody(message))).toEqual(JSON.parse(JSON.stringify(message)));
            expect(message).toEqual(messageOf(batch, message.sends));
            expect(message.sends.length).toBeGreaterThan(0);
            expect(message.sends.length).toBeLessThanOrEqual(sendsPerMessage);
            expect(bytes(message)).toBeLessThanOrEqual(maxBodyBytes);
            const next = messages[i + 1]?.sends[0];
            // closed early? only if it was full, or the next send would have taken it over the limit
            if (next && message.sends.length < sendsPerMessage) {
              expect(bytes(messageOf(batch, [...message.sends, next]))).toBeGreaterThan(maxBodyBytes);
            }
          });
        },
      ),
      { numRuns: 200 },
    );
  });

  it("refuses before counting exactly when some send's message alone exceeds the limit", () => {
    const names = ["new", "é-vip", 'q"uote', "rest"];
    fc.assert(
      fc.property(batchArbitrary, decisionsArbitrary, fc.integer({ min: -60, max: 60 }), (batch, decisions, offset) => {
        const sizes = decisions.map(({ userId, segment }) => bytes(messageOf(batch, [sendOf(batch, userId, segment)])));
        const limit = Math.max(0, (sizes.length > 0 ? Math.max(...sizes) : 0) + offset);
        const order = decisions.map((d, i) => ({ ...d, i })).sort((a, b) => a.userId - b.userId);
        const sends: PlannedSends = {
          userIds: Uint32Array.from(order.map((d) => d.userId)),
          segmentOf: Uint8Array.from(order.map((d) => names.indexOf(d.segment))),
          segmentNames: names,
        };
        const tooLarge = sizes.some((size) => size > limit);
        let refused: unknown;
        try {
          refuseUndeliverable(batch, sends, limit);
        } catch (error) {
          refused = error;
        }
        expect(refused !== undefined).toBe(tooLarge);
        if (refused !== undefined) {
          expect(refused).toBeInstanceOf(ValidationError);
          expect((refused as ValidationError).path).toBe(batch.payload === undefined ? "" : "payload");
        }
      }),
      { numRuns: 300 },
    );
  });
});
