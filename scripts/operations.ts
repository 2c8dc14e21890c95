// The operator actions the CLI, the demo, the bench and the tests share: upload objects and rules, push a
// campaign onto the campaign queue, read what arrived on the delivery queue.
import { PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import {
  DeleteMessageBatchCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  type SendMessageBatchRequestEntry,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import { chunkEntries } from "../functions/adapters/sqs-sinks.ts";
import type { CampaignBatchInput } from "../functions/core/capping/campaign-batch.ts";
import type { DeliveryMessage } from "../functions/core/capping/delivery.ts";
import { DEFAULT_POLICY_KEY } from "../functions/core/capping/policy.ts";
import { buildSegments } from "../functions/core/capping/segment-builder.ts";

export async function uploadObject(
  s3: S3Client,
  bucket: string,
  key: string,
  body: Uint8Array | string,
): Promise<void> {
  await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));
}

/**
 * Builds each segment's bitmap from its members and uploads them, then the policy: bitmaps first, so
 * consumers never see a policy naming a bitmap that is not there yet.
 */
export async function uploadRules<Policy extends { segments: readonly { name: string; bitmap: string }[] }>(
  s3: S3Client,
  bucket: string,
  policy: Policy,
  members: Record<string, readonly number[]>,
): Promise<void> {
  const built = buildSegments(policy.segments.map(({ name }) => ({ name, userIds: members[name] ?? [] })));
  for (const { name, bitmap } of policy.segments) await uploadObject(s3, bucket, bitmap, built.get(name) as Uint8Array);
  await uploadObject(s3, bucket, DEFAULT_POLICY_KEY, JSON.stringify(policy, null, 2));
}

export interface CampaignPush extends Omit<CampaignBatchInput, "userIds"> {
  userIds: readonly number[];
  /** User IDs per campaign-batch message (default 10,000: about 110 KB, far below SQS's 1 MiB). */
  usersPerMessage?: number;
  /** Told after each SendMessageBatch call with the users sent so far. */
  onProgress?: (usersSent: number) => void;
}

/** Sends the campaign as batch messages; returns how many messages. Throws if SQS refused any. */
export async function pushCampaign(sqs: SQSClient, queueUrl: string, push: CampaignPush): Promise<number> {
  const { userIds, usersPerMessage = 10_000, onProgress, ...batch } = push;
  const entries: SendMessageBatchRequestEntry[] = [];
  const usersOf = new Map<string, number>();
  for (let start = 0, i = 0; start < userIds.length; start += usersPerMessage, i++) {
    const slice = userIds.slice(start, start + usersPerMessage);
    entries.push({ Id: String(i), MessageBody: JSON.stringify({ ...batch, userIds: slice }) });
    usersOf.set(String(i), slice.length);
  }
  let sent = 0;
  for (const chunk of chunkEntries(entries)) {
    const reply = await sqs.send(new SendMessageBatchCommand({ QueueUrl: queueUrl, Entries: chunk }));
    const failed = reply.Failed ?? [];
    if (failed.length > 0) {
      throw new Error(
        `the campaign queue refused ${failed.length} messages: ${failed[0]?.Code}: ${failed[0]?.Message}`,
      );
    }
    for (const entry of chunk) sent += usersOf.get(entry.Id as string) ?? 0;
    onProgress?.(sent);
  }
  return entries.length;
}

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
