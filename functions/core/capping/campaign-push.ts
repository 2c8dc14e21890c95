// Pushing a campaign (an operator action): the campaign's fields validated once, its users split into
// campaign-batch messages small enough for the queue, sent in order.
import { parseOrThrow } from "../shared/validation.ts";
import { type CampaignBatchInput, campaignBatchSchema } from "./campaign-batch.ts";

/** Where campaign batches go (the campaign queue): every body sent, or a rejection; told as bodies go out. */
export interface CampaignQueue {
  send(bodies: readonly string[], onSent: (bodiesSent: number) => void): Promise<void>;
}

export interface CampaignPush extends Omit<CampaignBatchInput, "userIds"> {
  userIds: readonly number[];
  /** User IDs per campaign-batch message (default 10,000: about 110 KB, far below SQS's 1 MiB). */
  usersPerMessage?: number;
  /** Told as messages go out, with the users sent so far. */
  onProgress?: (usersSent: number) => void;
}

/** Validates the campaign's fields (ValidationError names the field), then sends it; returns how many messages. */
export async function pushCampaign(queue: CampaignQueue, push: CampaignPush): Promise<number> {
  const { userIds, usersPerMessage = 10_000, onProgress, ...fields } = push;
  // the fields once; each message's user IDs are checked by the consumer that decides them
  const batch = parseOrThrow(campaignBatchSchema, { ...fields, userIds: [] });
  const bodies: string[] = [];
  const usersBefore: number[] = [0];
  for (let start = 0; start < userIds.length; start += usersPerMessage) {
    const slice = userIds.slice(start, start + usersPerMessage);
    bodies.push(JSON.stringify({ ...batch, userIds: slice }));
    usersBefore.push(start + slice.length);
  }
  await queue.send(bodies, (sent) => onProgress?.(usersBefore[sent] as number));
  return bodies.length;
}
