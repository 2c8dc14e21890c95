// A store in a few lines for tests that are not about the store (middleware, lifecycle): every key of a
// request gets `allowance` (approximate) or `tokens` (strict); with `once`, only its first time, then the
// key's window is full for 1 s (nothing, and denyUntil); `failWith` makes the next calls throw.

import type { QuotaRule, SyncReply, SyncRequest } from "../../src/protocol/index.ts";
import type { QuotaTransport } from "../../src/quotas.ts";
import { storeReply } from "./quota-fixtures.ts";

export function fakeStore(options: { rule: QuotaRule; amount: number; instances?: number; once?: boolean }) {
  const calls: SyncRequest[] = [];
  const granted = new Set<string>();
  let fail: Error | undefined;
  const transport: QuotaTransport = {
    async sync(request, now): Promise<SyncReply> {
      calls.push(structuredClone(request));
      if (fail) throw fail;
      const reply = storeReply(request, now, options.rule, options.amount, { instances: options.instances ?? 1 });
      if (!options.once) return reply;
      for (const entry of reply.entries) {
        if (!granted.has(entry.key)) granted.add(entry.key);
        else if (entry.mode === "approximate") Object.assign(entry, { allowance: 0, denyUntil: now + 1_000 });
        else Object.assign(entry, { tokens: 0, denyUntil: now + 1_000 });
      }
      return reply;
    },
  };
  const failWith = (error: Error | undefined) => {
    fail = error;
  };
  return { transport, calls, failWith };
}
