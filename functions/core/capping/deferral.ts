// Deferred sends on their way back: the campaign-batch messages that re-decide them at their eligibleAt, and
// the port that carries a message until then (SQS delays up to 15 minutes, a scheduler beyond: adapters).
// A deferred message is a campaign batch like any other (same campaign ID, so the same dedupe ids), with
// `at` set to the instant it is due and `defer.since` to the first decision, which bounds every re-deferral.
import { createHash } from "node:crypto";
import type { CampaignBatch } from "./campaign-batch.ts";
import type { CapBatchResult } from "./decisions.ts";

/** The longest delay SQS gives one message (DelaySeconds 900). */
export const SQS_MAX_DELAY_MS = 900_000;
/**
 * Users per deferred message at most: 10 ASCII digits and a comma each is 110 KB, inside both the campaign
 * queue's message and a one-time schedule's 256 KB input.
 */
export const USERS_PER_DEFERRAL = 10_000;

/** One deferred message: due at `eligibleAt`; `name` is the same whenever the same sends are deferred again. */
export interface Deferral {
  name: string;
  eligibleAt: number;
  body: string;
  users: number;
}

/** Carries deferred messages to the campaign queue at their instant; resolves once every one is taken. */
export interface DeferralScheduler {
  /** `now`: the clock reading the batch was decided by (delays are measured from it). */
  schedule(deferrals: readonly Deferral[], now: number): Promise<void>;
}

/**
 * The deferred messages of a decided batch: one per eligible instant and chunk of USERS_PER_DEFERRAL users
 * (so a million users deferred to one instant is 100 messages). Their `defer.since` is the instant quiet
 * hours first held the sends: the batch's own when it is itself a deferral.
 */
export function deferralMessages(batch: CampaignBatch, result: CapBatchResult): Deferral[] {
  const held = result.held;
  if (!held || held.deferred.length === 0) return [];
  if (!batch.defer) throw new Error("sends were deferred for a batch without defer");
  const first = batch.defer.since ?? held.judgedAt;
  const groups = held.deferred;
  const deferrals: Deferral[] = [];
  for (const { eligibleAt, userIds } of groups) {
    for (let start = 0; start < userIds.length; start += USERS_PER_DEFERRAL) {
      const chunk = userIds.slice(start, start + USERS_PER_DEFERRAL);
      const message: CampaignBatch = {
        campaignId: batch.campaignId,
        channel: batch.channel,
        userIds: chunk,
        at: eligibleAt,
        defer: { maxMs: batch.defer.maxMs, since: first },
      };
      if (batch.payload !== undefined) message.payload = batch.payload;
      // the deferred sends keep their room in the caps (a name without it for a batch without it, as before)
      if (batch.priority !== undefined) message.priority = batch.priority;
      deferrals.push({ name: deferralName(message), eligibleAt, body: JSON.stringify(message), users: chunk.length });
    }
  }
  return deferrals;
}

/**
 * A name from the sends the message carries (64 characters at most, a scheduler's limit): campaign, channel,
 * users, eligibleAt, maxMs and payload, not `defer.since`. A first batch without `at` is judged at the clock
 * of each attempt, so a retry's `since` differs while its sends are the same: it is named the same.
 */
function deferralName(message: CampaignBatch): string {
  const { defer, ...sends } = message;
  const identity = JSON.stringify({ ...sends, maxMs: defer?.maxMs });
  return `tollgate-${createHash("sha256").update(identity).digest("hex").slice(0, 48)}`;
}
