// What the Lambda SQS event source mapping does, for the local stack: receive up to a batch (within a
// batching window), invoke the handler with a real SQSEvent and a Lambda-like context, delete what
// succeeded, and leave the batchItemFailures (or everything, if the handler threw) to come back after
// the visibility timeout; the queue's redrive policy moves a message to its DLQ after maxReceiveCount.
import { randomUUID } from "node:crypto";
import {
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  type Message,
  ReceiveMessageCommand,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import type { Context, SQSBatchResponse, SQSEvent } from "aws-lambda";

export type SqsHandler = (event: SQSEvent, context: Context) => Promise<SQSBatchResponse | undefined>;

export interface SqsPollerOptions {
  sqs: SQSClient;
  queueUrl: string;
  queueArn: string;
  region: string;
  handler: SqsHandler;
  /** Records per invocation (Lambda: 1-10,000). */
  batchSize?: number;
  /** How long to gather a batch (Lambda: MaximumBatchingWindowInSeconds). */
  batchingWindowMs?: number;
  /** Invocations at once (Lambda: maximum concurrency). */
  concurrency?: number;
  /** The function timeout the context reports. */
  functionTimeoutMs?: number;
  /** Told when an invocation throws (the whole batch returns to the queue). */
  onInvocationError?: (error: unknown) => void;
}

export interface PollerStats {
  invocations: number;
  records: number;
  failedRecords: number;
  failedInvocations: number;
  /** Wall time inside the handler, ms. */
  handlerMs: number;
}

export class SqsPoller {
  private running = false;
  private busy = 0;
  private loops: Promise<void>[] = [];
  readonly stats: PollerStats = { invocations: 0, records: 0, failedRecords: 0, failedInvocations: 0, handlerMs: 0 };

  constructor(private readonly options: SqsPollerOptions) {}

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loops = Array.from({ length: this.options.concurrency ?? 1 }, () => this.loop());
  }

  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.loops);
  }

  /** Resolves once the queue holds no message (visible or in flight) and no invocation runs. */
  async drained(timeoutMs = 120_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const { Attributes } = await this.options.sqs.send(
        new GetQueueAttributesCommand({
          QueueUrl: this.options.queueUrl,
          AttributeNames: ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        }),
      );
      const waiting =
        Number(Attributes?.ApproximateNumberOfMessages ?? 0) +
        Number(Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0);
      if (waiting === 0 && this.busy === 0) return;
      if (Date.now() > deadline) throw new Error(`queue not drained within ${timeoutMs} ms (${waiting} messages left)`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  private async loop(): Promise<void> {
    while (this.running) {
      const messages = await this.gather();
      if (messages.length === 0) continue;
      this.busy++;
      try {
        await this.invoke(messages);
      } finally {
        this.busy--;
      }
    }
  }

  private async gather(): Promise<Message[]> {
    const { sqs, queueUrl } = this.options;
    const batchSize = this.options.batchSize ?? 10;
    const windowEnds = Date.now() + (this.options.batchingWindowMs ?? 0);
    const messages: Message[] = [];
    while (this.running && messages.length < batchSize) {
      const { Messages = [] } = await sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: queueUrl,
          MaxNumberOfMessages: Math.min(10, batchSize - messages.length),
          WaitTimeSeconds: messages.length === 0 ? 1 : 0,
          MessageSystemAttributeNames: ["All"],
          MessageAttributeNames: ["All"],
        }),
      );
      messages.push(...Messages);
      if (Messages.length === 0 || Date.now() >= windowEnds) break;
    }
    return messages;
  }

  private async invoke(messages: Message[]): Promise<void> {
    const { sqs, queueUrl, queueArn, region, handler } = this.options;
    const event = toSqsEvent(messages, queueArn, region);
    this.stats.invocations++;
    this.stats.records += messages.length;
    let failed = new Set<string>();
    const started = performance.now();
    try {
      const response = await handler(event, lambdaContext(this.options.functionTimeoutMs ?? 60_000));
      failed = new Set((response?.batchItemFailures ?? []).map((failure) => failure.itemIdentifier));
    } catch (error) {
      // a thrown invocation returns the whole batch to the queue
      this.stats.failedInvocations++;
      failed = new Set(messages.map((message) => message.MessageId as string));
      this.options.onInvocationError?.(error);
    } finally {
      this.stats.handlerMs += performance.now() - started;
    }
    this.stats.failedRecords += failed.size;
    const done = messages.filter((message) => !failed.has(message.MessageId as string));
    for (let i = 0; i < done.length; i += 10) {
      await sqs.send(
        new DeleteMessageBatchCommand({
          QueueUrl: queueUrl,
          Entries: done
            .slice(i, i + 10)
            .map((message, j) => ({ Id: String(j), ReceiptHandle: message.ReceiptHandle as string })),
        }),
      );
    }
  }
}

/** The event Lambda builds from received messages. */
export function toSqsEvent(messages: readonly Message[], queueArn: string, region: string): SQSEvent {
  return {
    Records: messages.map((message) => ({
      messageId: message.MessageId as string,
      receiptHandle: message.ReceiptHandle as string,
      body: message.Body ?? "",
      attributes: {
        ApproximateReceiveCount: message.Attributes?.ApproximateReceiveCount ?? "1",
        SentTimestamp: message.Attributes?.SentTimestamp ?? String(Date.now()),
        SenderId: message.Attributes?.SenderId ?? "local",
        ApproximateFirstReceiveTimestamp: message.Attributes?.ApproximateFirstReceiveTimestamp ?? String(Date.now()),
      },
      messageAttributes: Object.fromEntries(
        Object.entries(message.MessageAttributes ?? {}).map(([name, value]) => [
          name,
          {
            dataType: value.DataType ?? "String",
            ...(value.StringValue === undefined ? {} : { stringValue: value.StringValue }),
          },
        ]),
      ),
      md5OfBody: message.MD5OfBody ?? "",
      eventSource: "aws:sqs",
      eventSourceARN: queueArn,
      awsRegion: region,
    })),
  };
}

/** The deadline of one invocation, on its context (a symbol: no field of Lambda's own context). */
const DEADLINE = Symbol("deadline");
const noop = () => {};
/** Shared by every context: a closure per invocation is emulation work Lambda's runtime does not ask of the function. */
function remainingTime(this: { [DEADLINE]: number }): number {
  return Math.max(0, this[DEADLINE] - Date.now());
}

/**
 * A Lambda context whose remaining time counts down from `timeoutMs`: per function its names, per
 * invocation its request ID and deadline, as the runtime hands them over.
 */
export function lambdaContext(timeoutMs: number, functionName = "tollgate-campaign-consumer"): Context {
  const context: Context & { [DEADLINE]: number } = {
    callbackWaitsForEmptyEventLoop: false,
    functionName,
    functionVersion: "$LATEST",
    invokedFunctionArn: `arn:aws:lambda:local:000000000000:function:${functionName}`,
    memoryLimitInMB: "1024",
    awsRequestId: randomUUID(),
    logGroupName: `/aws/lambda/${functionName}`,
    logStreamName: "local",
    getRemainingTimeInMillis: remainingTime,
    done: noop,
    fail: noop,
    succeed: noop,
    [DEADLINE]: Date.now() + timeoutMs,
  };
  return context;
}
