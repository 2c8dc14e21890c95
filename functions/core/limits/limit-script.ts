// The wire protocol of the one-limit scripts (lua/limit-common.lua, one lua/<algorithm>.lua, lua/limit.lua;
// their headers are the contract): the arguments of one limit and the decoding of its integer reply. The
// store port for both rate-limit scripts is here too.
import type { Algorithm, LimitResult, LimitSpec } from "./limit-specs.ts";

/** What the limiter needs from the store. */
export interface LimitStore {
  /** Runs the one-limit script of `algorithm` (POST /v1/limit). */
  runLimit(algorithm: Algorithm, key: string, args: readonly string[]): Promise<number[]>;
  /** Runs lua/limits.lua on keys that share one hash tag (POST /v1/limits). */
  runLimits(keys: readonly string[], args: readonly string[]): Promise<number[]>;
}

/** Integers in one limit's reply: allowed, limit, remaining, resetAt, retryAfterMs. */
export const REPLY_PER_LIMIT = 5;

/** ARGV of lua/limit.lua: now, cost, then the algorithm's parameters (the script reads missing ones as nil). */
export function limitArgs(now: number, spec: LimitSpec, cost: number): string[] {
  // appended in place, not spread: this runs on every check
  return parameters(spec, [String(now), String(cost)]);
}

/**
 * The parameters p1..p4 of each algorithm, as its lua/<algorithm>.lua header names them (unused ones left
 * out), appended to `head`.
 */
export function parameters(spec: LimitSpec, head: string[] = []): string[] {
  switch (spec.algorithm) {
    case "token-bucket":
      head.push(String(spec.max), String(spec.refillAmount), String(spec.refillEveryMs), spec.strict ? "1" : "0");
      break;
    case "gcra":
      head.push(String(spec.burst), String(spec.count), String(spec.periodMs));
      break;
    default:
      head.push(String(spec.max), String(spec.windowMs));
  }
  return head;
}

/** One limit's result at `offset` of a reply; a denial always carries a retry time of at least 1 ms. */
export function decodeResult(reply: readonly number[], offset = 0): LimitResult {
  const result: LimitResult = {
    allowed: reply[offset] === 1,
    limit: reply[offset + 1] as number,
    remaining: reply[offset + 2] as number,
    resetAt: reply[offset + 3] as number,
  };
  if (!result.allowed) result.retryAfterMs = Math.max(1, reply[offset + 4] ?? 1);
  return result;
}

export function decodeLimitReply(reply: readonly number[]): LimitResult {
  if (reply.length !== REPLY_PER_LIMIT)
    throw new Error(`limit replied ${reply.length} integers, not ${REPLY_PER_LIMIT}`);
  return decodeResult(reply);
}
