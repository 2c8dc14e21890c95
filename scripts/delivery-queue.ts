// Reading the delivery queue, for the CLI's `delivery tail`, the demo and the tests (the real reader of
// that queue is the delivery service, not Tollgate).
import {
  DeleteMessageBatchCommand,
  type Message,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import { chunkEntries } from "../functions/adapters/sqs-sinks.ts";
import type { DeliveryMessage } from "../functions/core/capping/delivery.ts";

/** How long a tail keeps what it read out of sight, so it never reads a message twice. */
const HOLD_SECONDS = 120;

/**
 * Receives delivery messages until the queue has none left (or `max` arrived), handing each to `onMessage`.
 * With `remove` the messages are deleted once read (draining the queue). Without it they are put back: each
 * is sent again as a fresh message (body and attributes as they were) and the received copy deleted. SQS has
 * no peek, and every receive counts toward the queue's maxReceiveCount, so a tail that only let messages
 * return after their visibility timeout would move each one a step toward the DLQ.
 */
export async function readDelivery(
  sqs: SQSClient,
  queueUrl: string,
  options: {
    /** Each message, with when the queue took it (SentTimestamp, ms). */
    onMessage: (message: DeliveryMessage, sentAt: number) => void;
    remove?: boolean;
    max?: number;
    waitSeconds?: number;
  },
): Promise<number> {
  let count = 0;
  const max = options.max ?? Number.POSITIVE_INFINITY;
  const held: Message[] = [];
  try {
    while (count < max) {
      const { Messages = [] } = await sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: queueUrl,
          MaxNumberOfMessages: Math.min(10, max - count),
          WaitTimeSeconds: options.waitSeconds ?? 0,
          // held out of sight until the tail ends, so a put-back copy is not read again by this tail
          VisibilityTimeout: HOLD_SECONDS,
          MessageAttributeNames: ["All"],
          MessageSystemAttributeNames: ["SentTimestamp"],
        }),
      );
      if (Messages.length === 0) break;
      count += Messages.length;
      if (options.remove) await deleteMessages(sqs, queueUrl, Messages);
      else held.push(...Messages);
      for (const message of Messages) {
        const sentAt = Number(message.Attributes?.SentTimestamp);
        options.onMessage(JSON.parse(message.Body ?? "{}") as DeliveryMessage, sentAt);
      }
    }
  } finally {
    await putBack(sqs, queueUrl, held);
  }
  return count;
}

/**
 * Sends each message again as it came, then deletes the received copy: the queue holds it once more with
 * no receive counted. A tail stopped between the two leaves a repeat, which the delivery side drops by
 * `dedupeId`, never a loss.
 */
async function putBack(sqs: SQSClient, queueUrl: string, messages: readonly Message[]): Promise<void> {
  const entries = messages.map((message, i) => ({
    Id: String(i),
    MessageBody: message.Body ?? "",
    ...(message.MessageAttributes ? { MessageAttributes: message.MessageAttributes } : {}),
  }));
  for (const chunk of chunkEntries(entries)) {
    const reply = await sqs.send(new SendMessageBatchCommand({ QueueUrl: queueUrl, Entries: chunk }));
    const sent = new Set((reply.Successful ?? []).map((entry) => Number(entry.Id)));
    // a copy that did not go out keeps its original: it returns after the hold, one receive counted
    await deleteMessages(
      sqs,
      queueUrl,
      chunk.filter((entry) => sent.has(Number(entry.Id))).map((entry) => messages[Number(entry.Id)] as Message),
    );
  }
}

async function deleteMessages(sqs: SQSClient, queueUrl: string, messages: readonly Message[]): Promise<void> {
  for (let start = 0; start < messages.length; start += 10) {
    await sqs.send(
      new DeleteMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: messages
          .slice(start, start + 10)
          .map((message, i) => ({ Id: String(i), ReceiptHandle: message.ReceiptHandle as string })),
      }),
    );
  }
}
