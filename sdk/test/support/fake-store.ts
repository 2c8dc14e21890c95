// A store in a few lines for tests that are not about the store (middleware, lifecycle): every key of a
// request gets `allowance` (approximate) or `tokens` (strict); `failWith` makes the next calls throw.

import type { QuotaRule, SyncReply, SyncRequest } from "../../src/protocol/index.ts";
import type { QuotaTransport } from "../../src/quotas.ts";
import { storeReply } from "./quota-fixtures.ts";

export function fakeStore(options: { rule: QuotaRule; amount: number; instances?: number }) {
  const calls: SyncRequest[] = [];
  let fail: Error | undefined;
  const transport: QuotaTransport = {
    async sync(request, now): Promise<SyncReply> {
      calls.push(structuredClone(request));
      if (fail) throw fail;
      return storeReply(request, now, options.rule, options.amount, { instances: options.instances ?? 1 });
    },
  };
  const failWith = (error: Error | undefined) => {
    fail = error;
  };
  return { transport, calls, failWith };
}
