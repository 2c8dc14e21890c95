// What the SDK's tests share: a clock they set by hand, a scheduler that never fires (rounds are started by
// the test), the reply the store gives every key of a request, the most admitted in any window, and the fault
// tests' fleet rule.
import type { QuotaRule, SyncReply, SyncRequest } from "../../src/protocol/index.ts";

/** A clock the test sets (`set`) or moves (`advance`). */
export function manualClock(start = 1_000_000) {
  let now = start;
  return {
    now: () => now,
    set: (at: number) => {
      now = at;
    },
    advance: (ms: number) => {
      now += ms;
    },
  };
}

/** A scheduler whose timers never fire: the test starts each round itself. */
export const neverScheduler = { schedule: () => ({ cancel() {} }) };

/**
 * The store's reply to `request` as lua/quota-sync/ shapes it: every key gets `amount` (strict tokens
 * until now + leaseMs, or an approximate allowance valid as long), and the rule when the request saw
 * another version.
 */
export function storeReply(
  request: SyncRequest,
  now: number,
  rule: QuotaRule,
  amount: number,
  options: { version?: string; instances?: number } = {},
): SyncReply {
  const version = options.version ?? "v1";
  return {
    status: "applied",
    serverTime: now,
    configVersion: version,
    instances: options.instances ?? 1,
    ...(request.configVersion === version ? {} : { rule }),
    entries: request.entries.map((e) => {
      const base = { key: e.key, denyUntil: 0, resetAt: now + 1_000, used: rule.limits.map(() => 0) };
      return rule.mode === "strict"
        ? { ...base, mode: "strict" as const, tokens: amount, leaseExpiresAt: now + rule.leaseMs }
        : { ...base, mode: "approximate" as const, allowance: amount, validUntil: now + rule.leaseMs };
    }),
  };
}

/** The most admissions in any window of `windowMs` (times in any order). */
export function maxInWindow(admitted: readonly number[], windowMs: number): number {
  const times = [...admitted].sort((a, b) => a - b);
  let best = 0;
  let start = 0;
  for (let end = 0; end < times.length; end++) {
    while ((times[end] as number) - (times[start] as number) >= windowMs) start++;
    best = Math.max(best, end - start + 1);
  }
  return best;
}

/** The fault tests' fleet rule: strict, FLEET_LIMIT per 1 s, a 500 ms lease, deny without the store, one slot group. */
export const FLEET_LIMIT = 40;
export const fleetStrictRule: QuotaRule = {
  mode: "strict",
  limits: [{ windowMs: 1_000, max: FLEET_LIMIT }],
  leaseMs: 500,
  fallback: "deny",
  slotGroups: 1,
};
