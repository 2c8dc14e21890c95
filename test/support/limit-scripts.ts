// Calls the rate-limit scripts with raw parameters through the production store (RedisLimitStore over the
// real cluster), for the script-level property tests.
import { RedisLimitStore, type TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import { decodeLimitReply } from "../../functions/core/limits/limit-script.ts";
import type { Algorithm } from "../../functions/core/limits/limit-specs.ts";

/** A script reply with retryAfterMs 0 when allowed, as the reference models give it. */
export interface ScriptReply {
  allowed: boolean;
  limit: number;
  remaining: number;
  resetAt: number;
  retryAfterMs: number;
}

export function scriptStore(cluster: TollgateCluster): RedisLimitStore {
  return new RedisLimitStore(cluster, { deadlineMs: 5_000 });
}

/**
 * lua/limits.lua's arguments from raw parameters: now, then per limit its cost and p1..p4, then the function's
 * clock (default: now), packed; the algorithms.
 */
export function packedLimitsArgs(
  now: number,
  limits: readonly { algorithm: Algorithm; cost: number; params: readonly (string | number)[] }[],
  clock = now,
): (string | Buffer)[] {
  const numbers = Buffer.alloc(16 + 40 * limits.length);
  numbers.writeDoubleLE(now, 0);
  numbers.writeDoubleLE(clock, 8 + 40 * limits.length);
  limits.forEach((limit, i) => {
    [limit.cost, ...limit.params.map(Number)].forEach((value, j) => {
      numbers.writeDoubleLE(value, 8 + 40 * i + 8 * j);
    });
  });
  return [numbers, ...limits.map((limit) => limit.algorithm)];
}

export async function runLimit(
  store: RedisLimitStore,
  algorithm: Algorithm,
  key: string,
  now: number,
  cost: number,
  params: readonly (string | number)[],
  clock = now,
): Promise<ScriptReply> {
  const args = Buffer.alloc(56);
  [now, cost, ...params.map(Number)].forEach((value, i) => {
    args.writeDoubleLE(value, 8 * i);
  });
  args.writeDoubleLE(clock, 48);
  const result = decodeLimitReply(await store.runLimit(algorithm, key, args));
  return { ...result, retryAfterMs: result.retryAfterMs ?? 0 };
}
