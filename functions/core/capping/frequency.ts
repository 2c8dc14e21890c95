// POST /v1/frequency: one user, one channel. The decision comes from cap-sends (atomic); the windows are
// worked out exactly from the user's log and the policy's caps.
import { z } from "zod";
import { campaignIdSchema, channelSchema, sendTimeSchema, userIdSchema } from "../shared/send-fields.ts";
import type { LoggedSend } from "./cap-sends-script.ts";
import type { CapDecision } from "./decisions.ts";
import type { CapRule } from "./policy.ts";

// strict: an unknown field (a typo such as `comsume`) is refused, never silently dropped
export const frequencyRequestSchema = z.strictObject({
  userId: userIdSchema,
  channel: channelSchema,
  campaignId: campaignIdSchema.optional(),
  at: sendTimeSchema.optional(),
  consume: z.boolean("expected true or false").optional(),
});

export interface FrequencyWindow {
  channel: string;
  window: string;
  max: number;
  used: number;
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
}

/**
 * The sends of the fullest window of `windowMs` that contains `at` (a window (x - W, x] with x from `at`
 * to `at + W - 1`), oldest first. lua/cap-sends.lua decides with the same rule (decide(): a send is allowed
 * when every such window holds fewer than max), so sends stamped ahead count as well as sends behind;
 * this copy explains its decisions. test/integration/window-predicate.test.ts checks that the two agree.
 */
export function fullestWindowAround(times: readonly number[], at: number, windowMs: number): number[] {
  const near = times.filter((t) => t > at - windowMs && t < at + windowMs).sort((a, b) => a - b);
  let fullest: number[] = [];
  for (const end of [at, ...near.filter((t) => t > at)]) {
    const inside = near.filter((t) => t > end - windowMs && t <= end);
    if (inside.length > fullest.length) fullest = inside;
  }
  return fullest;
}

export function frequencyReport(
  decision: CapDecision,
  caps: readonly CapRule[],
  history: readonly LoggedSend[],
  now: number,
): FrequencyResult {
  let never = false;
  const timesOf = caps.map((cap) =>
    history.filter(({ identity }) => cap.channel === "*" || identity.startsWith(`${cap.channel}:`)).map(({ at }) => at),
  );
  const windows = caps.map((cap, i): FrequencyWindow => {
    const counted = fullestWindowAround(timesOf[i] as number[], now, cap.windowMs);
    const used = counted.length;
    if (used >= cap.max && cap.max === 0) never = true;
    return {
      channel: cap.channel,
      window: cap.window,
      max: cap.max,
      used,
      remaining: Math.max(0, cap.max - used),
      resetAt: counted.length > 0 ? (counted[0] as number) + cap.windowMs : now,
    };
  });
  const allowed = decision.decision !== "capped";
  const result: FrequencyResult = { allowed, decision: decision.decision, segment: decision.segment, windows };
  if (!allowed && !never) result.retryAfterMs = Math.max(1, earliestAllowedAt(caps, timesOf, now) - now);
  return result;
}

/**
 * The earliest time after `now` at which the same check is allowed by decide()'s rule (every window around
 * it holds fewer than max). The fullest window around x only empties when a send leaves it, at t + W, so
 * those moments are the only candidates; each is checked with the rule itself.
 */
function earliestAllowedAt(caps: readonly CapRule[], timesOf: readonly number[][], now: number): number {
  const allowedAt = (x: number) =>
    caps.every((cap, i) => fullestWindowAround(timesOf[i] as number[], x, cap.windowMs).length < cap.max);
  const candidates = caps
    .flatMap((cap, i) => (timesOf[i] as number[]).map((t) => t + cap.windowMs))
    .filter((x) => x > now)
    .sort((a, b) => a - b);
  for (const x of candidates) if (allowedAt(x)) return x;
  return now + 1; // unreachable: after the last candidate every window is empty
}
