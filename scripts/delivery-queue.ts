// Reading the delivery queue, for the CLI's `delivery tail`, the demo and the tests (the real reader of
// that queue is the delivery service, not Tollgate).
import { DeleteMessageBatchCommand, ReceiveMessageCommand, type SQSClient } from "@aws-sdk/client-sqs";
import type { DeliveryMessage } from "../functions/core/capping/delivery.ts";

/**
 * Receives delivery messages until the queue has none left (or `max` arrived), handing each to `onMessage`.
 * With `remove` the messages are deleted once read (draining the queue); otherwise they return after
 * their visibility timeout.
 */
export async function readDelivery(
  sqs: SQSClient,
  queueUrl: string,
  options: { onMessage: (message: DeliveryMessage) => void; remove?: boolean; max?: number; waitSeconds?: number },
): Promise<number> {
  let count = 0;
  const max = options.max ?? Number.POSITIVE_INFINITY;
  while (count < max) {
    const { Messages = [] } = await sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: queueUrl,
        MaxNumberOfMessages: Math.min(10, max - count),
        WaitTimeSeconds: options.waitSeconds ?? 0,
      }),
    );
    if (Messages.length === 0) break;
    for (const message of Messages) options.onMessage(JSON.parse(message.Body ?? "{}") as DeliveryMessage);
    count += Messages.length;
    if (options.remove) {
      await sqs.send(
        new DeleteMessageBatchCommand({
          QueueUrl: queueUrl,
          Entries: Messages.map((message, i) => ({ Id: String(i), ReceiptHandle: message.ReceiptHandle as string })),
        }),
      );
    }
  }
  return count;
}
