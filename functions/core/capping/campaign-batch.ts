// The campaign batch: the message a campaign tool puts on the campaign queue, and the capper's input.
import { z } from "zod";
import { MAX_USER_ID } from "./segment-builder.ts";

/** One script call's reply and the sort trick in the capper both bound a batch. */
export const MAX_BATCH_USERS = 1_000_000;

// The fields a send is made of; the frequency check and the limits reuse them.
const userIdMessage = `expected a user ID: an integer from 0 to ${MAX_USER_ID}`;
export const userIdSchema = z.int(userIdMessage).min(0, userIdMessage).max(MAX_USER_ID, userIdMessage);
export const campaignIdSchema = z
  .string("expected a string")
  .min(1, "must not be empty")
  .max(128, "must be at most 128 characters")
  .regex(/^[\x21-\x7e]+$/, "expected printable ASCII without spaces");
export const channelSchema = z
  .string("expected a string")
  .min(1, "must not be empty")
  .max(64, "must be at most 64 characters");
/** A client-given time (`at`); decisionTime() refuses one too far ahead of the clock. */
export const sendTimeSchema = z.int("expected ms since the epoch").min(0, "expected ms since the epoch");

export const campaignBatchSchema = z.object({
  campaignId: campaignIdSchema,
  channel: channelSchema,
  userIds: z
    .array(userIdSchema, "expected an array of user IDs")
    .max(MAX_BATCH_USERS, `at most ${MAX_BATCH_USERS} user IDs`),
  payload: z.unknown().optional(),
  at: sendTimeSchema.optional(),
  exempt: z.boolean("expected true or false").optional(),
  countExempt: z.boolean("expected true or false").optional(),
});

export type CampaignBatch = z.output<typeof campaignBatchSchema>;
export type CampaignBatchInput = z.input<typeof campaignBatchSchema>;
