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

/** p1..p4, unused ones empty. */
export function padded(params: readonly (string | number)[]): string[] {
  const out = params.map(String);
  while (out.length < 4) out.push("");
  return out;
}

export async function runLimit(
  store: RedisLimitStore,
  algorithm: Algorithm,
  key: string,
  now: number,
  cost: number,
  params: readonly (string | number)[],
): Promise<ScriptReply> {
  const args = Buffer.alloc(48);
  [now, cost, ...params.map(Number)].forEach((value, i) => {
    args.writeDoubleLE(value, 8 * i);
  });
  const result = decodeLimitReply(await store.runLimit(algorithm, key, args));
  return { ...result, retryAfterMs: result.retryAfterMs ?? 0 };
}
