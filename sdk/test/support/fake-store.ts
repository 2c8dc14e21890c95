// A store in a few lines for tests that are not about the store (middleware, lifecycle): every key of a
// request gets `allowance` (approximate) or `tokens` (strict); `failWith` makes the next calls throw.
import type { QuotaTransport } from "../../src/quotas.ts";
import type { QuotaRule, SyncReply, SyncRequest } from "../../src/wire.ts";

export function fakeStore(options: { rule: QuotaRule; amount: number; instances?: number }) {
  const calls: SyncRequest[] = [];
  let fail: Error | undefined;
  const transport: QuotaTransport = {
    async sync(request, now): Promise<SyncReply> {
      calls.push(structuredClone(request));
      if (fail) throw fail;
      const { rule, amount } = options;
      return {
        status: "applied",
        serverTime: now,
        configVersion: "v1",
        instances: options.instances ?? 1,
        ...(request.configVersion === "v1" ? {} : { rule }),
        entries: request.entries.map((e) => {
          const base = { key: e.key, denyUntil: 0, resetAt: now + 1_000, used: rule.limits.map(() => 0) };
          return rule.mode === "strict"
            ? { ...base, mode: "strict" as const, tokens: amount, leaseExpiresAt: now + rule.leaseMs }
            : { ...base, mode: "approximate" as const, allowance: amount, validUntil: now + rule.leaseMs };
        }),
      };
    },
  };
  const failWith = (error: Error | undefined) => {
    fail = error;
  };
  return { transport, calls, failWith };
}
