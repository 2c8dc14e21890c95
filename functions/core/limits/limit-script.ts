// The wire protocol of the one-limit scripts (lua/limit-common.lua, one lua/<algorithm>.lua, lua/limit.lua;
// their headers are the contract): the packed arguments of one limit and the decoding of its packed reply. The
// store port for both rate-limit scripts is here too.
import type { Algorithm, LimitResult, LimitSpec } from "./limit-specs.ts";

/** What the limiter needs from the store. */
export interface LimitStore {
  /** Runs the one-limit script of `algorithm` (POST /v1/limit) with its packed arguments (limitArgs). */
  runLimit(algorithm: Algorithm, key: string, args: Buffer): Promise<Buffer>;
  /** Runs lua/limits.lua on keys that share one hash tag (POST /v1/limits). */
  runLimits(keys: readonly string[], args: readonly (string | Buffer)[]): Promise<number[]>;
}

/** Integers in one limit's reply: allowed, limit, remaining, resetAt, retryAfterMs. */
export const REPLY_PER_LIMIT = 5;

/** lua/limit.lua's ARGV[1]: now, cost, p1..p4, clock as little-endian doubles (integers: exact below 2^53). */
const LIMIT_ARGS_BYTES = 56;

/**
 * ARGV[1] of lua/limit.lua: now (the request's time), cost, then the algorithm's parameters p1..p4 (unused
 * ones 0), then `clock` (the function's clock: key lifetimes are counted by it, never by `at` alone), packed.
 * Redis parses one argument instead of six, and the script reads every number with one struct.unpack
 * instead of parsing decimal text (tonumber), which cost more than the rest of a fixed window's call.
 */
export function limitArgs(now: number, spec: LimitSpec, cost: number, clock: number): Buffer {
  // a slice of Node's pool (this runs on every check); every byte is written below
  const packed = Buffer.allocUnsafe(LIMIT_ARGS_BYTES);
  packed.writeDoubleLE(now, 0);
  packed.writeDoubleLE(cost, 8);
  packParameters(spec, packed, 16);
  packed.writeDoubleLE(clock, 48);
  return packed;
}

/** Writes p1..p4 of `spec` (parameterValues()) at `offset`. */
export function packParameters(spec: LimitSpec, packed: Buffer, offset: number): void {
  const [p1, p2, p3, p4] = parameterValues(spec);
  packed.writeDoubleLE(p1, offset);
  packed.writeDoubleLE(p2, offset + 8);
  packed.writeDoubleLE(p3, offset + 16);
  packed.writeDoubleLE(p4, offset + 24);
}

/** Whether packed limitArgs charge nothing (cost 0): a peek, which writes nothing. */
export const peeks = (args: Buffer): boolean => args.readDoubleLE(8) === 0;

/** The parameters p1..p4 of each algorithm, as its lua/<algorithm>.lua header names them (unused ones 0). */
export function parameterValues(spec: LimitSpec): [number, number, number, number] {
  switch (spec.algorithm) {
    case "token-bucket":
      return [spec.max, spec.refillAmount, spec.refillEveryMs, spec.strict ? 1 : 0];
    case "gcra":
      return [spec.burst, spec.count, spec.periodMs, 0];
    default:
      return [spec.max, spec.windowMs, 0, 0];
  }
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

/** Bytes of lua/limit.lua's reply: five little-endian doubles, each an integer. */
const LIMIT_REPLY_BYTES = 8 * REPLY_PER_LIMIT;

/** lua/limit.lua's packed reply: allowed, limit, remaining, resetAt, retryAfterMs. */
export function decodeLimitReply(reply: Buffer): LimitResult {
  if (reply.length !== LIMIT_REPLY_BYTES)
    throw new Error(`limit replied ${reply.length} bytes, not ${LIMIT_REPLY_BYTES}`);
  const result: LimitResult = {
    allowed: reply.readDoubleLE(0) === 1,
    limit: reply.readDoubleLE(8),
    remaining: reply.readDoubleLE(16),
    resetAt: reply.readDoubleLE(24),
  };
  if (!result.allowed) result.retryAfterMs = Math.max(1, reply.readDoubleLE(32));
  return result;
}
