// The fields a send or a check is made of (user ID, campaign ID, channel, `at`): one definition, reused by
// the campaign batch, the frequency check and the rate limits. Plain zod, no native code.
import { z } from "zod";

/** User IDs are unsigned 32-bit (the segment bitmaps are RoaringBitmap32). */
export const MAX_USER_ID = 0xffff_ffff;

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
