// POST /v1/frequency: one user, one channel. The decision and every window's figures come from one
// cap-sends call (atomic): the script works them out from the user's sends, so the reply's size is the
// number of caps, whatever the user's history.
import { z } from "zod";
import { campaignIdSchema, channelSchema, sendTimeSchema, userIdSchema } from "../shared/send-fields.ts";
import type { UserWindows } from "./cap-sends-script.ts";
import type { CapDecision } from "./decisions.ts";
import type { CapRule } from "./policy.ts";
import { prioritySchema, reservedAbove } from "./priority.ts";

// strict: an unknown field (a typo such as `comsume`) is refused, never silently dropped
export const frequencyRequestSchema = z.strictObject({
  userId: userIdSchema,
  channel: channelSchema,
  campaignId: campaignIdSchema.optional(),
  at: sendTimeSchema.optional(),
  consume: z.boolean("expected true or false").optional(),
  /** The priority of the send asked about (priority.ts); default promotional, the lowest. */
  priority: prioritySchema.optional(),
});

export interface FrequencyWindow {
  channel: string;
  window: string;
  max: number;
  /** Slots of max kept for priorities above the request's (present when some are). */
  reserved?: number;
  used: number;
  /** What the request's priority may still take: max less `reserved` less `used`, at least 0. */
  remaining: number;
  /** When the oldest send counted in this window ages out (now when none is counted). */
  resetAt: number;
}

export interface FrequencyResult {
  allowed: boolean;
  decision: CapDecision["decision"];
  segment: string;
  windows: FrequencyWindow[];
  /** When capped: the earliest time the same check would be allowed (absent when a cap of 0 means never). */
  retryAfterMs?: number;
  /**
   * Why it said no, when quiet hours did (`quiet_hours`) or a reserve for higher priorities did (`reserve`,
   * with `decision: "displaced"`); a cap says it through `decision: "capped"`.
   */
  reason?: "quiet_hours" | "reserve";
  /** With `reason: "quiet_hours"`: the instant quiet hours end in the user's zone (nothing was counted). */
  eligibleAt?: number;
}

/**
 * The reply for one user: `caps` are the policy's caps of the user's segment on the channel, in the script's
 * order; `at` the send time decided, `priority` the request's.
 */
export function frequencyReport(
  decision: CapDecision,
  caps: readonly CapRule[],
  figures: UserWindows,
  { at, priority }: { at: number; priority: number },
): FrequencyResult {
  if (figures.caps.length !== caps.length) {
    throw new Error(`cap-sends reported ${figures.caps.length} windows for ${caps.length} caps`);
  }
  const windows = caps.map((cap, i): FrequencyWindow => {
    const { used, resetAt } = figures.caps[i] as UserWindows["caps"][number];
    const reserved = reservedAbove(cap.reserve, priority);
    const window: FrequencyWindow = {
      channel: cap.channel,
      window: cap.window,
      max: cap.max,
      used,
      remaining: 0,
      resetAt,
    };
    if (reserved > 0) window.reserved = reserved;
    window.remaining = Math.max(0, cap.max - reserved - used);
    return window;
  });
  const allowed =
    decision.decision !== "capped" && decision.decision !== "displaced" && decision.eligibleAt === undefined;
  const result: FrequencyResult = { allowed, decision: decision.decision, segment: decision.segment, windows };
  if (decision.eligibleAt !== undefined) {
    result.reason = "quiet_hours";
    result.eligibleAt = decision.eligibleAt;
    return result;
  }
  if (decision.decision === "displaced") result.reason = "reserve";
  if (!allowed && figures.retryAt !== undefined) result.retryAfterMs = Math.max(1, figures.retryAt - at);
  return result;
}
