// The wire protocol of lua/limits.lua (its header is the contract): the arguments for a list of limits and
// the decoding of its flat integer reply. The Limiter never sees an argument position or a reply offset.
import { decodeResult, packParameters, REPLY_PER_LIMIT } from "./limit-script.ts";
import type { LimitResult, LimitSpec } from "./limit-specs.ts";

/** Bytes per limit in ARGV[1]: its cost and p1..p4, little-endian doubles (after now's 8). */
const BYTES_PER_LIMIT = 40;

/**
 * ARGV: the numbers packed (now, then per limit its cost and p1..p4, unused ones 0, then `clock`, the
 * function's clock that key lifetimes are counted by), then each limit's algorithm (see lua/limit.lua on why
 * numbers travel packed).
 */
export function limitsArgs(
  now: number,
  specs: readonly LimitSpec[],
  costs: readonly number[],
  clock: number,
): (string | Buffer)[] {
  const numbers = Buffer.allocUnsafe(16 + BYTES_PER_LIMIT * specs.length);
  numbers.writeDoubleLE(now, 0);
  numbers.writeDoubleLE(clock, 8 + BYTES_PER_LIMIT * specs.length);
  const args: (string | Buffer)[] = [numbers];
  specs.forEach((spec, i) => {
    const at = 8 + BYTES_PER_LIMIT * i;
    numbers.writeDoubleLE(costs[i] as number, at);
    packParameters(spec, numbers, at + 8);
    args.push(spec.algorithm);
  });
  return args;
}

/** Whether every limit of limitsArgs charges nothing (cost 0): a peek, which writes nothing. */
export function peeksAll(args: readonly (string | Buffer)[]): boolean {
  const numbers = args[0];
  if (!Buffer.isBuffer(numbers)) return false;
  // the costs only: the clock follows the last limit
  for (let at = 8; at < numbers.length - 8; at += BYTES_PER_LIMIT) if (numbers.readDoubleLE(at) !== 0) return false;
  return true;
}

/** One result per limit, in argument order (after the leading "every limit allowed" flag). */
export function decodeLimitsReply(reply: readonly number[], limits: number): LimitResult[] {
  if (reply.length !== 1 + REPLY_PER_LIMIT * limits) {
    throw new Error(`limits replied ${reply.length} integers for ${limits} limits`);
  }
  return Array.from({ length: limits }, (_, i) => decodeResult(reply, 1 + REPLY_PER_LIMIT * i));
}
