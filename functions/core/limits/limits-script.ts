// The wire protocol of lua/limits.lua (its header is the contract): the arguments for a list of limits and
// the decoding of its flat integer reply. The Limiter never sees an argument position or a reply offset.
import type { LimitResult, LimitSpec } from "./limit-specs.ts";

/** What the limiter needs from the store: run lua/limits.lua on keys that share one hash tag. */
export interface LimitStore {
  runLimits(keys: readonly string[], args: readonly string[]): Promise<number[]>;
}

/** Integers per limit in the reply, after the leading "every limit allowed" flag. */
const REPLY_PER_LIMIT = 5;

/** ARGV: now, then per limit its algorithm, cost and four parameters (unused ones empty). */
export function limitsArgs(now: number, specs: readonly LimitSpec[], cost: number): string[] {
  return [String(now), ...specs.flatMap((spec) => [spec.algorithm, String(cost), ...parameters(spec)])];
}

/** p1..p4 of each algorithm, as its lua/<algorithm>.lua header names them. */
function parameters(spec: LimitSpec): [string, string, string, string] {
  switch (spec.algorithm) {
    case "token-bucket":
      return [String(spec.max), String(spec.refillAmount), String(spec.refillEveryMs), spec.strict ? "1" : "0"];
    case "gcra":
      return [String(spec.burst), String(spec.count), String(spec.periodMs), ""];
    default:
      return [String(spec.max), String(spec.windowMs), "", ""];
  }
}

/** One result per limit, in argument order; a denial always carries a retry time of at least 1 ms. */
export function decodeLimitsReply(reply: readonly number[], limits: number): LimitResult[] {
  if (reply.length !== 1 + REPLY_PER_LIMIT * limits) {
    throw new Error(`limits replied ${reply.length} integers for ${limits} limits`);
  }
  return Array.from({ length: limits }, (_, i) => {
    const at = 1 + REPLY_PER_LIMIT * i;
    const [allowed, limit, remaining, resetAt, retryAfterMs] = reply.slice(at, at + REPLY_PER_LIMIT) as number[];
    const result: LimitResult = {
      allowed: allowed === 1,
      limit: limit as number,
      remaining: remaining as number,
      resetAt: resetAt as number,
    };
    if (!result.allowed) result.retryAfterMs = Math.max(1, retryAfterMs ?? 1);
    return result;
  });
}
