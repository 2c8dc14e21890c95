// The campaign batch: the message a campaign tool puts on the campaign queue, and the capper's input.
import { z } from "zod";
import { campaignIdSchema, channelSchema, sendTimeSchema, userIdsSchema } from "../shared/send-fields.ts";
import { prioritySchema } from "./priority.ts";

/** The longest a campaign may ask a send to wait for the end of quiet hours. */
export const MAX_DEFER_MS = 7 * 86_400_000;

/**
 * `defer`: a send inside quiet hours, or capped, is re-decided at its eligibleAt if that is at most `maxMs`
 * after `since` (the first decision of the send; the deferred message carries it), otherwise dropped (0:
 * every such send is dropped with its reason at once).
 */
export const deferSchema = z.strictObject({
  maxMs: z.int(`expected ms from 0 to ${MAX_DEFER_MS}`).min(0).max(MAX_DEFER_MS),
  since: z.int("expected ms since the epoch").min(0).optional(),
});

/** One script call's reply and the sort trick in the capper both bound a batch. */
export const MAX_BATCH_USERS = 1_000_000;

// strict: a misspelt field (`countexempt`) is refused by name, never silently dropped
export const campaignBatchSchema = z.strictObject({
  campaignId: campaignIdSchema,
  channel: channelSchema,
  userIds: userIdsSchema(MAX_BATCH_USERS),
  payload: z.unknown().optional(),
  at: sendTimeSchema.optional(),
  exempt: z.boolean("expected true or false").optional(),
  countExempt: z.boolean("expected true or false").optional(),
  defer: deferSchema.optional(),
  /** Which room of the caps the sends may take (priority.ts); default promotional, the lowest. */
  priority: prioritySchema.optional(),
});

export type CampaignBatch = z.output<typeof campaignBatchSchema>;
export type CampaignBatchInput = z.input<typeof campaignBatchSchema>;
