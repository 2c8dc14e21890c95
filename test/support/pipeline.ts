// Helpers for pipeline tests: a local stack of real parts per test file, and a way to drive the handler
// with exactly the messages a test chose (as Lambda's event source mapping would).
import { DeleteMessageCommand, type Message, ReceiveMessageCommand, SendMessageCommand } from "@aws-sdk/client-sqs";
import type { SQSBatchResponse } from "aws-lambda";
import { createAwsClients } from "../../functions/adapters/aws-clients.ts";
import { uploadRules as uploadRulesTo } from "../../functions/app/operator-actions.ts";
import type { DeliveryMessage } from "../../functions/core/capping/delivery.ts";
import { readDelivery } from "../../scripts/delivery-queue.ts";
import { withLocalTenant } from "../../scripts/local/local-principals.ts";
import { lambdaContext, toSqsEvent } from "../../scripts/local/sqs-poller.ts";
import { type LocalStack, type LocalStackOptions, startLocalStack } from "../../scripts/local-stack.ts";
import { uniqueNamespace } from "./cluster.ts";

export async function testStack(options: LocalStackOptions = {}): Promise<LocalStack> {
  return startLocalStack({
    poll: false,
    writeEndpoints: false,
    queuePrefix: uniqueNamespace(),
    ...options,
    environment: { KEY_NAMESPACE: uniqueNamespace(), ...options.environment },
    // the deployed 50 ms deadline measures the machine when the suite loads both cores (a slow script
    // became a 503 in an example test); tests about the deadline set their own
    checkApiEnvironment: { CHECK_TIMEOUT_MS: "1000", ...options.checkApiEnvironment },
  });
}

export function clientsOf(stack: LocalStack) {
  return createAwsClients({ region: stack.endpoints.region, endpoint: stack.endpoints.awsEndpoint });
}

/**
 * Uploads a policy and the bitmaps of its segments (members by segment name); a policy naming no tenants
 * gets the local principal's (every operation, every quota rule), as the local stack and demo configure.
 */
export async function uploadRules<
  Policy extends { segments: readonly { name: string; bitmap: string }[]; quotas?: readonly unknown[] },
>(stack: LocalStack, policy: Policy, members: Record<string, number[]>) {
  await uploadRulesTo(clientsOf(stack).s3, stack.endpoints.bucket, withLocalTenant(policy), members);
}

export async function sendRaw(stack: LocalStack, body: string): Promise<string> {
  const { MessageId } = await stack.sqs.send(
    new SendMessageCommand({ QueueUrl: stack.endpoints.campaignQueueUrl, MessageBody: body }),
  );
  return MessageId as string;
}

/** Receives exactly `count` messages from a queue (waiting for them to become visible). */
export async function receive(
  stack: LocalStack,
  count: number,
  queueUrl = stack.endpoints.campaignQueueUrl,
  visibilityTimeout?: number,
): Promise<Message[]> {
  const messages: Message[] = [];
  const deadline = Date.now() + 30_000;
  while (messages.length < count) {
    if (Date.now() > deadline) throw new Error(`only ${messages.length} of ${count} messages arrived`);
    const { Messages = [] } = await stack.sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: queueUrl,
        MaxNumberOfMessages: Math.min(10, count - messages.length),
        WaitTimeSeconds: 1,
        MessageSystemAttributeNames: ["All"],
        MessageAttributeNames: ["All"],
        ...(visibilityTimeout === undefined ? {} : { VisibilityTimeout: visibilityTimeout }),
      }),
    );
    messages.push(...Messages);
  }
  return messages;
}

/**
 * Invokes the consumer handler with these messages as one SQS event, then, like the event source mapping,
 * deletes the messages that did not fail (unless `settle` is false: the function "died" after its work).
 */
export async function invoke(
  stack: LocalStack,
  messages: Message[],
  options: { settle?: boolean; timeoutMs?: number } = {},
): Promise<SQSBatchResponse> {
  const campaignArn = `arn:aws:sqs:${stack.endpoints.region}:000000000000:campaign`;
  const event = toSqsEvent(messages, campaignArn, stack.endpoints.region);
  const response = (await stack.consumer.handler(
    event,
    lambdaContext(options.timeoutMs ?? 60_000),
  )) as SQSBatchResponse;
  if (options.settle !== false) {
    const failed = new Set(response.batchItemFailures.map((f) => f.itemIdentifier));
    for (const message of messages.filter((m) => !failed.has(m.MessageId as string))) {
      await stack.sqs.send(
        new DeleteMessageCommand({
          QueueUrl: stack.endpoints.campaignQueueUrl,
          ReceiptHandle: message.ReceiptHandle as string,
        }),
      );
    }
  }
  return response;
}

/** Every delivery message now on the delivery queue (drained). */
export async function drainDelivery(stack: LocalStack): Promise<DeliveryMessage[]> {
  const messages: DeliveryMessage[] = [];
  await readDelivery(stack.sqs, stack.endpoints.deliveryQueueUrl, { remove: true, onMessage: (m) => messages.push(m) });
  return messages;
}

/** Every message now on a queue, as SQS holds it (body and attributes), deleted once read. */
export async function drainRaw(stack: LocalStack, queueUrl: string): Promise<Message[]> {
  const messages: Message[] = [];
  for (;;) {
    const { Messages = [] } = await stack.sqs.send(
      new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, MessageAttributeNames: ["All"] }),
    );
    if (Messages.length === 0) return messages;
    for (const message of Messages) {
      messages.push(message);
      await stack.sqs.send(
        new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: message.ReceiptHandle as string }),
      );
    }
  }
}

/** A message's size as SQS counts it against MaximumMessageSize: the body plus each attribute's name, type and value. */
export function sqsSize(message: Message): number {
  let size = Buffer.byteLength(message.Body ?? "", "utf8");
  for (const [name, value] of Object.entries(message.MessageAttributes ?? {})) {
    size +=
      Buffer.byteLength(name) + Buffer.byteLength(value.DataType ?? "") + Buffer.byteLength(value.StringValue ?? "");
  }
  return size;
}
