// Pushing a campaign (an operator action): the campaign's fields validated once, against the policy in
// service when one is given (the channel, `at`), its users split into campaign-batch messages small enough
// for the queue, sent in order.
import { type Clock, decisionTime } from "../shared/clock.ts";
import { ValidationError } from "../shared/errors.ts";
import { parseOrThrow } from "../shared/validation.ts";
import { type CampaignBatch, type CampaignBatchInput, campaignBatchSchema } from "./campaign-batch.ts";
import type { Policy } from "./policy.ts";

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

/** The policy the consumers decide by and the clock to judge `at` with: what the consumer would refuse. */
export interface PolicyInService {
  policy: Pick<Policy, "channels" | "backfillMs" | "version">;
  clock: Clock;
}

/**
 * The checks the consumer makes on every message of the campaign, made once before anything is sent: the
 * channel is one the policy lists, `at` is neither too far ahead of the clock nor older than the policy's
 * longest window. A ValidationError names the field; without these a push "succeeds" into the DLQ.
 */
export function checkAgainstPolicy(batch: Pick<CampaignBatch, "channel" | "at">, { policy, clock }: PolicyInService) {
  if (!policy.channels.includes(batch.channel)) {
    throw new ValidationError(
      "channel",
      `unknown channel "${batch.channel}" (policy ${policy.version} has ${policy.channels.join(", ")})`,
    );
  }
  decisionTime(batch.at, clock, policy.backfillMs);
}

/**
 * Validates the campaign's fields (ValidationError names the field), and with `inService` checks them against
 * that policy, then sends it; returns how many messages.
 */
export async function pushCampaign(
  queue: CampaignQueue,
  push: CampaignPush,
  inService?: PolicyInService,
): Promise<number> {
  const { userIds, usersPerMessage = 10_000, onProgress, ...fields } = push;
  // the fields once; each message's user IDs are checked by the consumer that decides them
  const batch = parseOrThrow(campaignBatchSchema, { ...fields, userIds: [] });
  if (inService) checkAgainstPolicy(batch, inService);
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
