// The campaign batch: the message a campaign tool puts on the campaign queue, and the capper's input.
import { z } from "zod";
import { campaignIdSchema, channelSchema, sendTimeSchema, userIdsSchema } from "../shared/send-fields.ts";

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
});

export type CampaignBatch = z.output<typeof campaignBatchSchema>;
export type CampaignBatchInput = z.input<typeof campaignBatchSchema>;
