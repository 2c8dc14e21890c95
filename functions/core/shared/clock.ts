// Time is a port: production reads the system clock, tests pass a fixed one.
import { ValidationError } from "./errors.ts";

/** `at` may run ahead of the clock by this much (clock skew between producers); more is rejected. */
export const MAX_FUTURE_MS = 5 * 60_000;

/**
 * The time a request is decided at: its `at`, or now. An `at` too far ahead, or more than `backfillMs`
 * behind the clock (when given: the policy's longest window, the rate limits' 365 days), is a
 * ValidationError naming the field.
 */
export function decisionTime(at: number | undefined, clock: Clock, backfillMs?: number): number {
  return decisionTimeAt(at, clock.now(), backfillMs);
}

/** decisionTime() with the clock already read (`now`): for a caller that also needs that reading. */
export function decisionTimeAt(at: number | undefined, now: number, backfillMs?: number): number {
  if (at !== undefined && at > now + MAX_FUTURE_MS) {
    throw new ValidationError("at", `${at} is more than ${MAX_FUTURE_MS / 60_000} minutes ahead of the clock (${now})`);
  }
  if (at !== undefined && backfillMs !== undefined && at < now - backfillMs) {
    throw new ValidationError("at", `${at} is more than ${backfillMs} ms behind the clock (${now})`);
  }
  return at ?? now;
}

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

export function fixedClock(at: number): Clock & { set(at: number): void; advance(ms: number): void } {
  let current = at;
  return {
    now: () => current,
    set: (next) => {
      current = next;
    },
    advance: (ms) => {
      current += ms;
    },
  };
}
