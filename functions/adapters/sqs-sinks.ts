// The SQS queues Tollgate writes to: delivery messages out and poison messages to the DLQ (the consumer),
// campaign batches in (the operator's campaign push).
import {
  type MessageAttributeValue,
  SendMessageBatchCommand,
  type SendMessageBatchRequestEntry,
  SendMessageCommand,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import type { DeadLetterReason, DeadLetterSink } from "../core/capping/campaign-consumer.ts";
import type { CampaignQueue } from "../core/capping/campaign-push.ts";
import { type DeliveryMessage, type DeliverySink, deliveryBody } from "../core/capping/delivery.ts";
import { DeliveryError } from "../core/shared/errors.ts";

/** SendMessageBatch takes at most 10 entries and 1 MiB in all (bodies and attributes). */
const MAX_ENTRIES = 10;
const MAX_BATCH_BYTES = 1_048_576;
/** SQS's largest message (bodies and attributes), and every queue's default MaximumMessageSize. */
export const SQS_MAX_MESSAGE_BYTES = 1_048_576;

type Failure = DeliveryError["failures"][number];

export interface SqsDeliverySinkOptions {
  /** Attempts per entry whose failure is not the sender's fault (throttling, service errors). */
  attempts?: number;
  /** SendMessageBatch calls in flight at once. */
  concurrency?: number;
  /** Told of every failed entry or call that will be retried (for metrics). */
  onRetry?: (reason: string) => void;
  /**
   * The delivery queue's MaximumMessageSize (default SQS's 1 MiB). A message is never built larger, so SQS
   * never refuses one for its size.
   */
  maxMessageBytes?: number;
}

export class SqsDeliverySink implements DeliverySink {
  private readonly attempts: number;
  private readonly concurrency: number;
  private readonly maxMessageBytes: number;

  constructor(
    private readonly sqs: SQSClient,
    private readonly queueUrl: string,
    private readonly options: SqsDeliverySinkOptions = {},
  ) {
    this.attempts = options.attempts ?? 3;
    this.concurrency = options.concurrency ?? 8;
    this.maxMessageBytes = options.maxMessageBytes ?? SQS_MAX_MESSAGE_BYTES;
  }

  maxBodyBytes(batch: Pick<DeliveryMessage, "campaignId" | "channel">): number {
    return this.maxMessageBytes - entrySize({ MessageAttributes: deliveryAttributes(batch) });
  }

  async send(messages: readonly DeliveryMessage[]): Promise<void> {
    const entries = messages.map(
      (message, i): SendMessageBatchRequestEntry => ({
        Id: String(i),
        MessageBody: deliveryBody(message),
        MessageAttributes: deliveryAttributes(message),
      }),
    );
    const chunks = chunkEntries(entries);
    const failures: Failure[] = [];
    let next = 0;
    const worker = async () => {
      while (next < chunks.length)
        failures.push(...(await this.sendChunk(chunks[next++] as SendMessageBatchRequestEntry[])));
    };
    await Promise.all(Array.from({ length: Math.min(this.concurrency, chunks.length) }, worker));
    if (failures.length > 0) throw new DeliveryError(messages.length, failures);
  }

  /**
   * Sends one chunk. Entries the sender got wrong (SenderFault) fail at once; the rest (throttling, service
   * errors, a failed call) are retried with jittered backoff. Returns what finally failed.
   */
  private async sendChunk(chunk: SendMessageBatchRequestEntry[]): Promise<Failure[]> {
    const permanent: Failure[] = [];
    let pending = chunk;
    for (let attempt = 1; ; attempt++) {
      const retry: SendMessageBatchRequestEntry[] = [];
      const transient: Failure[] = [];
      try {
        const reply = await this.sqs.send(new SendMessageBatchCommand({ QueueUrl: this.queueUrl, Entries: pending }));
        // Failed[] can be non-empty on an HTTP 200: every entry is checked
        for (const failed of reply.Failed ?? []) {
          const failure = {
            code: failed.Code ?? "Unknown",
            message: failed.Message ?? "",
            senderFault: failed.SenderFault === true,
          };
          if (failure.senderFault) {
            permanent.push(failure);
          } else {
            transient.push(failure);
            retry.push(pending.find((entry) => entry.Id === failed.Id) as SendMessageBatchRequestEntry);
          }
        }
      } catch (error) {
        const failure = { code: (error as Error).name, message: (error as Error).message, senderFault: false };
        transient.push(...pending.map(() => failure));
        retry.push(...pending);
      }
      if (retry.length === 0) return permanent;
      if (attempt >= this.attempts) return [...permanent, ...transient];
      this.options.onRetry?.(transient[0]?.code ?? "Unknown");
      pending = retry;
      await new Promise((resolve) => setTimeout(resolve, 50 * 2 ** attempt * (0.5 + Math.random())));
    }
  }
}

/** A delivery message's attributes, so consumers can route or filter without parsing the body. */
function deliveryAttributes(
  message: Pick<DeliveryMessage, "campaignId" | "channel">,
): Record<string, MessageAttributeValue> {
  return {
    campaignId: { DataType: "String", StringValue: message.campaignId },
    channel: { DataType: "String", StringValue: message.channel },
  };
}

/** Groups entries into SendMessageBatch calls of at most 10 entries and 1 MiB. */
export function chunkEntries(entries: readonly SendMessageBatchRequestEntry[]): SendMessageBatchRequestEntry[][] {
  const chunks: SendMessageBatchRequestEntry[][] = [];
  let current: SendMessageBatchRequestEntry[] = [];
  let bytes = 0;
  for (const entry of entries) {
    const size = entrySize(entry);
    if (current.length === MAX_ENTRIES || (current.length > 0 && bytes + size > MAX_BATCH_BYTES)) {
      chunks.push(current);
      current = [];
      bytes = 0;
    }
    current.push(entry);
    bytes += size;
  }
  if (current.length > 0) chunks.push(current);
  return chunks;
}

/** How SQS counts a message's size: the body plus each attribute's name, type and value. */
function entrySize(entry: { MessageBody?: string; MessageAttributes?: Record<string, MessageAttributeValue> }): number {
  let size = Buffer.byteLength(entry.MessageBody ?? "");
  for (const [name, value] of Object.entries(entry.MessageAttributes ?? {})) {
    size +=
      Buffer.byteLength(name) + Buffer.byteLength(value.DataType ?? "") + Buffer.byteLength(value.StringValue ?? "");
  }
  return size;
}

/**
 * Poison messages, and messages that failed on their last receive, go to the campaign queue's DLQ as they
 * came, with the reason as message attributes (error, reason, sourceMessageId, path). The body is kept
 * whole (it is what a redrive sends again); a body near the size limit keeps the attributes that still fit,
 * in that order, the reason cut short if need be, rather than failing the send and cycling to a redrive
 * with no reason at all.
 */
export class SqsDeadLetterSink implements DeadLetterSink {
  constructor(
    private readonly sqs: SQSClient,
    private readonly queueUrl: string,
    /** The DLQ's MaximumMessageSize (default SQS's 1 MiB). */
    private readonly maxMessageBytes = SQS_MAX_MESSAGE_BYTES,
  ) {}

  async send(body: string, reason: DeadLetterReason): Promise<void> {
    const wanted: [string, string][] = [
      ["error", reason.error],
      ["reason", sqsText(reason.message.slice(0, 1024))],
      ["sourceMessageId", reason.sourceMessageId],
      ...(reason.path ? [["path", sqsText(reason.path)] as [string, string]] : []),
    ];
    let room = this.maxMessageBytes - Buffer.byteLength(body);
    const attributes: Record<string, MessageAttributeValue> = {};
    for (const [name, value] of wanted) {
      const overhead = Buffer.byteLength(name) + Buffer.byteLength("String");
      const text = name === "reason" ? cutToBytes(value, room - overhead) : value;
      const size = overhead + Buffer.byteLength(text);
      if (text === "" || size > room) continue;
      attributes[name] = { DataType: "String", StringValue: text };
      room -= size;
    }
    await this.sqs.send(
      new SendMessageCommand({ QueueUrl: this.queueUrl, MessageBody: body, MessageAttributes: attributes }),
    );
  }
}

/**
 * `text` in at most `bytes` UTF-8 bytes, cut between characters and marked with "…" when cut; "" when fewer
 * than 32 bytes of it would be left (a stub of a reason says nothing).
 */
function cutToBytes(text: string, bytes: number): string {
  if (Buffer.byteLength(text) <= bytes) return text;
  const room = bytes - Buffer.byteLength("…");
  if (room < 32) return "";
  let cut = "";
  let used = 0;
  for (const char of text) {
    const size = Buffer.byteLength(char);
    if (used + size > room) break;
    cut += char;
    used += size;
  }
  return cut === "" ? "" : `${cut}…`;
}

/**
 * An attribute value SQS takes: the characters it refuses (controls, U+FFFE, U+FFFF, lone surrogates) become
 * U+FFFD. A reason quotes the message's own values (an unknown channel); the dead letter must not fail on it.
 */
function sqsText(text: string): string {
  return text.replace(/[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/gu, "\uFFFD");
}

/** The campaign queue: bodies sent in order, SendMessageBatch by SendMessageBatch; any refusal throws. */
export class SqsCampaignQueue implements CampaignQueue {
  constructor(
    private readonly sqs: SQSClient,
    private readonly queueUrl: string,
  ) {}

  async send(bodies: readonly string[], onSent: (bodiesSent: number) => void = () => {}): Promise<void> {
    let sent = 0;
    const entries = bodies.map((body, i): SendMessageBatchRequestEntry => ({ Id: String(i), MessageBody: body }));
    for (const chunk of chunkEntries(entries)) {
      const reply = await this.sqs.send(new SendMessageBatchCommand({ QueueUrl: this.queueUrl, Entries: chunk }));
      const failed = reply.Failed ?? [];
      if (failed.length > 0) {
        throw new Error(
          `the campaign queue refused ${failed.length} messages: ${failed[0]?.Code}: ${failed[0]?.Message}`,
        );
      }
      sent += chunk.length;
      onSent(sent);
    }
  }
}
