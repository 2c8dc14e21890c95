// Reading and redriving the campaign queue's DLQ, for the CLI's `dlq list|show|redrive`: each dead letter
// with the reason the consumer gave it (the message attributes SqsDeadLetterSink writes).
import {
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageBatchCommand,
  type Message,
  ReceiveMessageCommand,
  SendMessageCommand,
  type SQSClient,
} from "@aws-sdk/client-sqs";

/** How long a listing keeps what it read out of sight, so it never lists a message twice. */
const HOLD_SECONDS = 120;

export interface DeadLetter {
  /** The dead letter's own message ID on the DLQ (what `dlq show` and `dlq redrive` take). */
  messageId: string;
  /** The campaign message it was, on the campaign queue. */
  sourceMessageId: string;
  /** The error's class: ValidationError for the message's own fault, else the fault that exhausted retries. */
  error: string;
  reason: string;
  /** The field at fault ("" when none). */
  path: string;
  /** When it reached the DLQ (ms since the epoch), and how often it was received there. */
  sentAt: number;
  receiveCount: number;
  /** The campaign message as it came: what a redrive sends again. */
  body: string;
  /** From the body when it parses as a campaign batch. */
  campaignId?: string;
  channel?: string;
  users?: number;
}

/** A dead letter from what SQS returned: the reason from its attributes, the campaign from its body. */
export function deadLetterOf(message: Message): DeadLetter {
  const attribute = (name: string) => message.MessageAttributes?.[name]?.StringValue ?? "";
  const body = message.Body ?? "";
  const letter: DeadLetter = {
    messageId: message.MessageId ?? "",
    sourceMessageId: attribute("sourceMessageId"),
    // a message the queue's own redrive moved carries no reason: it failed every receive without one
    error: attribute("error") || "(none)",
    reason: attribute("reason") || "(no reason recorded: moved by the queue's redrive policy)",
    path: attribute("path"),
    sentAt: Number(message.Attributes?.SentTimestamp ?? 0),
    receiveCount: Number(message.Attributes?.ApproximateReceiveCount ?? 0),
    body,
  };
  try {
    const batch = JSON.parse(body) as { campaignId?: unknown; channel?: unknown; userIds?: unknown };
    if (typeof batch.campaignId === "string") letter.campaignId = batch.campaignId;
    if (typeof batch.channel === "string") letter.channel = batch.channel;
    if (Array.isArray(batch.userIds)) letter.users = batch.userIds.length;
  } catch {
    // a body that is not JSON is itself the reason it is here
  }
  return letter;
}

/**
 * Every dead letter on the queue (up to `max`), handed to `choose`: those it returns true for are handed to
 * `take` and deleted once it resolves; the rest are made visible again at once. A DLQ has no redrive policy of
 * its own, so receiving there moves nothing anywhere.
 */
export async function sweepDeadLetters(
  sqs: SQSClient,
  queueUrl: string,
  options: { max?: number; choose?: (letter: DeadLetter) => boolean; take?: (letter: DeadLetter) => Promise<void> },
): Promise<DeadLetter[]> {
  const max = options.max ?? Number.POSITIVE_INFINITY;
  const seen: DeadLetter[] = [];
  const held: Message[] = [];
  try {
    while (seen.length < max) {
      const { Messages = [] } = await sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: queueUrl,
          MaxNumberOfMessages: Math.min(10, max - seen.length),
          VisibilityTimeout: HOLD_SECONDS,
          MessageAttributeNames: ["All"],
          MessageSystemAttributeNames: ["SentTimestamp", "ApproximateReceiveCount"],
        }),
      );
      if (Messages.length === 0) break;
      for (const message of Messages) {
        const letter = deadLetterOf(message);
        seen.push(letter);
        if (options.choose?.(letter) && options.take) {
          await options.take(letter);
          await sqs.send(
            new DeleteMessageBatchCommand({
              QueueUrl: queueUrl,
              Entries: [{ Id: "0", ReceiptHandle: message.ReceiptHandle as string }],
            }),
          );
        } else {
          held.push(message);
        }
      }
    }
  } finally {
    for (let start = 0; start < held.length; start += 10) {
      await sqs.send(
        new ChangeMessageVisibilityBatchCommand({
          QueueUrl: queueUrl,
          Entries: held.slice(start, start + 10).map((message, i) => ({
            Id: String(i),
            ReceiptHandle: message.ReceiptHandle as string,
            VisibilityTimeout: 0,
          })),
        }),
      );
    }
  }
  return seen;
}

/**
 * Sends the chosen dead letters' bodies to `targetUrl` (the campaign queue) as they came, each deleted from
 * the DLQ only once it is sent; returns those redriven. A redriven message is decided again from scratch:
 * the idempotency identity of its sends keeps any it had counted from counting twice.
 */
export async function redriveDeadLetters(
  sqs: SQSClient,
  queueUrl: string,
  targetUrl: string,
  choose: (letter: DeadLetter) => boolean,
): Promise<DeadLetter[]> {
  const redriven: DeadLetter[] = [];
  await sweepDeadLetters(sqs, queueUrl, {
    choose,
    take: async (letter) => {
      await sqs.send(new SendMessageCommand({ QueueUrl: targetUrl, MessageBody: letter.body }));
      redriven.push(letter);
    },
  });
  return redriven;
}
