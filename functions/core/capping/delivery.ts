// Delivery messages: the approved sends of a decided batch, grouped for the delivery queue by count and by
// bytes, and the check that refuses, before anything is counted, a batch whose sends can never be delivered.
import { ValidationError } from "../shared/errors.ts";
import type { CampaignBatch } from "./campaign-batch.ts";
import type { PlannedSends } from "./capper.ts";
import { type CapDecision, HELD_KINDS } from "./decisions.ts";

export interface DeliverySend {
  userId: number;
  segment: string;
  /** Deterministic: the same send always has the same id, so the delivery side can drop repeats. */
  dedupeId: string;
}

export interface DeliveryMessage {
  campaignId: string;
  channel: string;
  payload?: unknown;
  sends: DeliverySend[];
}

/** What a delivery message is built from: the fields of the campaign batch it repeats. */
export type DeliveryBatch = Pick<CampaignBatch, "campaignId" | "channel" | "payload">;

/** What the consumer needs from the delivery queue: every message sent, or a rejection saying which were not. */
export interface DeliverySink {
  /**
   * The most bytes the JSON body of one delivery message of this campaign and channel may take: the
   * queue's message size limit less what the message carries besides its body (attributes).
   */
  maxBodyBytes(batch: Pick<DeliveryBatch, "campaignId" | "channel">): number;
  send(messages: readonly DeliveryMessage[]): Promise<void>;
}

export const DEFAULT_DELIVERY_BATCH_SIZE = 100;

export interface DeliveryLimits {
  /** Sends per message at most (DELIVERY_BATCH_SIZE). */
  sendsPerMessage: number;
  /** Body bytes per message at most (the sink's `maxBodyBytes` for the batch). */
  maxBodyBytes: number;
}

export function dedupeId(campaignId: string, channel: string, userId: number): string {
  return `${campaignId}:${channel}:${userId}`;
}

/** The body of a delivery message on the queue. The sizes below are this string's UTF-8 bytes, exactly. */
export function deliveryBody(message: DeliveryMessage): string {
  return toJson(message);
}

/**
 * JSON.stringify, with U+FFFE and U+FFFF escaped: SQS refuses a body holding either, and JSON.stringify
 * leaves them as they are (it escapes control characters and lone surrogates itself). Escaping is per
 * character, so the size of a message is still the sum of the sizes of its parts.
 */
function toJson(value: unknown): string {
  return JSON.stringify(value).replace(/[\uFFFE\uFFFF]/g, (char) => `\\u${char.charCodeAt(0).toString(16)}`);
}

const utf8Bytes = (text: string) => Buffer.byteLength(text, "utf8");

/**
 * The exact UTF-8 size of a delivery message's body, worked out per send without serialising the message:
 * body = envelope (the message with no sends, `[]` included) + each send's JSON + a comma between sends.
 */
export class DeliverySizer {
  readonly envelopeBytes: number;
  private readonly templates = new Map<string, number>();

  constructor(private readonly batch: DeliveryBatch) {
    this.envelopeBytes = utf8Bytes(deliveryBody(newMessage(batch, [])));
  }

  /** One send's JSON: its template with user 0 (two "0"s: `userId` and the end of `dedupeId`) + the digits. */
  sendBytes(userId: number, segment: string): number {
    let template = this.templates.get(segment);
    if (template === undefined) {
      const { campaignId, channel } = this.batch;
      template = utf8Bytes(toJson(deliverySend(campaignId, channel, 0, segment)));
      this.templates.set(segment, template);
    }
    return template - 2 + 2 * String(userId).length;
  }

  /** The body of a message holding only this send. */
  singleSendBytes(userId: number, segment: string): number {
    return this.envelopeBytes + this.sendBytes(userId, segment);
  }
}

/**
 * Refuses (ValidationError) a batch holding a send whose delivery message alone, with no other send, would
 * exceed `maxBodyBytes`: it could never be forwarded, so it must not be counted. Called before the capper
 * counts anything (its `beforeCount`); checks each segment's largest user ID, the longest send it has.
 */
export function refuseUndeliverable(batch: DeliveryBatch, sends: PlannedSends, maxBodyBytes: number): void {
  const { userIds, segmentOf, segmentNames } = sends;
  const largest = new Float64Array(segmentNames.length).fill(-1);
  // ascending IDs: the last one seen in a segment is its largest
  for (let j = 0; j < userIds.length; j++) largest[segmentOf[j] as number] = userIds[j] as number;
  const sizer = new DeliverySizer(batch);
  largest.forEach((userId, segment) => {
    if (userId < 0) return;
    const name = segmentNames[segment] as string;
    const bytes = sizer.singleSendBytes(userId, name);
    if (bytes > maxBodyBytes) {
      throw new ValidationError(
        batch.payload === undefined ? "" : "payload",
        `too large to deliver: the delivery message of one send (user ${userId}, segment "${name}") has a ` +
          `${bytes}-byte body, the delivery queue takes at most ${maxBodyBytes}; nothing was counted`,
      );
    }
  });
}

/**
 * Forwarded: allowed, duplicate (the dedupe id makes it safe) and exempt sends, each user once; capped
 * sends and sends held by quiet hours are not. A message is closed when it holds `sendsPerMessage` sends or the next send would take
 * its body over `maxBodyBytes`.
 */
export function deliveryMessages(
  batch: DeliveryBatch,
  decisions: readonly CapDecision[],
  limits: DeliveryLimits,
): DeliveryMessage[] {
  const sizer = new DeliverySizer(batch);
  const messages: DeliveryMessage[] = [];
  let current: DeliverySend[] = [];
  let bytes = sizer.envelopeBytes;
  const flush = () => {
    if (current.length === 0) return;
    messages.push(newMessage(batch, current));
    current = [];
    bytes = sizer.envelopeBytes;
  };
  const seen = new Set<number>();
  for (const { userId, segment, decision } of decisions) {
    if (decision === "capped" || decision === "displaced" || HELD_KINDS.has(decision) || seen.has(userId)) continue;
    seen.add(userId);
    const sendBytes = sizer.sendBytes(userId, segment);
    if (current.length > 0 && bytes + 1 + sendBytes > limits.maxBodyBytes) flush();
    if (current.length === 0 && bytes + sendBytes > limits.maxBodyBytes) {
      // refuseUndeliverable ran before counting with the same rules: reaching this is a defect
      throw new Error(`a delivery message of user ${userId} alone takes ${bytes + sendBytes} bytes`);
    }
    bytes += (current.length > 0 ? 1 : 0) + sendBytes;
    current.push(deliverySend(batch.campaignId, batch.channel, userId, segment));
    if (current.length === limits.sendsPerMessage) flush();
  }
  flush();
  return messages;
}

function deliverySend(campaignId: string, channel: string, userId: number, segment: string): DeliverySend {
  return { userId, segment, dedupeId: dedupeId(campaignId, channel, userId) };
}

function newMessage(batch: DeliveryBatch, sends: DeliverySend[]): DeliveryMessage {
  const message: DeliveryMessage = { campaignId: batch.campaignId, channel: batch.channel, sends };
  if (batch.payload !== undefined) message.payload = batch.payload;
  return message;
}
