// The campaign batch: the message a campaign tool puts on the campaign queue, and the capper's input.
import { z } from "zod";
import { MAX_USER_ID } from "./segment-builder.ts";

/** One script call's reply and the sort trick in the capper both bound a batch. */
export const MAX_BATCH_USERS = 1_000_000;

const userId = z
  .int(`expected a user ID: an integer from 0 to ${MAX_USER_ID}`)
  .min(0, `expected a user ID: an integer from 0 to ${MAX_USER_ID}`)
  .max(MAX_USER_ID, `expected a user ID: an integer from 0 to ${MAX_USER_ID}`);

export const campaignBatchSchema = z.object({
  campaignId: z
    .string("expected a string")
    .min(1, "must not be empty")
    .max(128, "must be at most 128 characters")
    .regex(/^[\x21-\x7e]+$/, "expected printable ASCII without spaces"),
  channel: z.string("expected a string").min(1, "must not be empty").max(64, "must be at most 64 characters"),
  userIds: z.array(userId, "expected an array of user IDs").max(MAX_BATCH_USERS, `at most ${MAX_BATCH_USERS} user IDs`),
  payload: z.unknown().optional(),
  at: z.int("expected ms since the epoch").min(0, "expected ms since the epoch").optional(),
  exempt: z.boolean("expected true or false").optional(),
  countExempt: z.boolean("expected true or false").optional(),
});

export type CampaignBatch = z.output<typeof campaignBatchSchema>;
export type CampaignBatchInput = z.input<typeof campaignBatchSchema>;
