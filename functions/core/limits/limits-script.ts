// The wire protocol of lua/limits.lua (its header is the contract): the arguments for a list of limits and
// the decoding of its flat integer reply. The Limiter never sees an argument position or a reply offset.
import { decodeResult, parameters, REPLY_PER_LIMIT } from "./limit-script.ts";
import type { LimitResult, LimitSpec } from "./limit-specs.ts";

/** ARGV: now, then per limit its algorithm, cost and four parameters (unused ones empty). */
export function limitsArgs(now: number, specs: readonly LimitSpec[], costs: readonly number[]): string[] {
  return [String(now), ...specs.flatMap((spec, i) => [spec.algorithm, String(costs[i]), ...fourParameters(spec)])];
}

/** p1..p4 of one limit, the unused ones "" (limits.lua reads each limit's arguments at fixed offsets). */
function fourParameters(spec: LimitSpec): string[] {
  const values = parameters(spec);
  while (values.length < 4) values.push("");
  return values;
}

/** One result per limit, in argument order (after the leading "every limit allowed" flag). */
export function decodeLimitsReply(reply: readonly number[], limits: number): LimitResult[] {
  if (reply.length !== 1 + REPLY_PER_LIMIT * limits) {
    throw new Error(`limits replied ${reply.length} integers for ${limits} limits`);
  }
  return Array.from({ length: limits }, (_, i) => decodeResult(reply, 1 + REPLY_PER_LIMIT * i));
}
