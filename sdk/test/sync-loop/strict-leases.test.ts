// Each test guards against a defect once found here, fixed since; its comment quotes the contract it broke.
// Strict tokens and their leases in the sync loop. The SDK's own ports only: a fake clock, a
// scheduler that never fires (rounds are started by hand), and transports written here that answer as
// lua/quota-sync/ does (leaseExpiresAt = the call's now + the rule's leaseMs).
import { describe, expect, it } from "vitest";
import { compileQuotaRules } from "../../../functions/core/shared/quota-rules.ts";
import type { QuotaRule } from "../../src/protocol/index.ts";
import { createQuotas, type QuotaTransport } from "../../src/quotas.ts";
import { manualClock, neverScheduler, storeReply } from "../support/quota-fixtures.ts";

describe("strict leases", () => {
  // Contract: docs/api.md, the policy's quotas: "`leaseMs` (strict: how long granted tokens stay usable,
  // default 50, at most half the shortest window ...)", with the example rule "search" (strict, 50 per 1 s,
  // "leaseMs": 50); docs/quotas.md: `createQuotas({ ..., syncIntervalMs = 50 })`, "Tokens are reserved before
  // they are spent" and strict's utilisation (85-100 % measured). The engine treats a lease as ended one
  // interval early, so with the default lease (50 ms) and the default interval (50 ms) every grant is
  // refunded the moment it arrives: a strict rule written with the defaults admits nothing, ever.
  it("a strict rule with the policy's default lease, on the SDK's default interval, admits requests with the tokens it is granted", async () => {
    const compiled = compileQuotaRules("p1", [{ name: "search", mode: "strict", limits: [{ window: "1s", max: 50 }] }]);
    const rule = compiled.get("search")!.rule;
    // 200 ms: 50 ms left the default loop nothing to spend
    expect(rule.leaseMs).toBe(200);
    const time = manualClock();
    const granted: number[] = [];
    const transport: QuotaTransport = {
      async sync(request, now) {
        // 1 ms round trip, like a store in the same AZ
        time.set(now + 1);
        const tokens = Math.min(10, Math.max(...request.entries.map((e) => e.want), 0));
        granted.push(tokens);
        return storeReply(request, now, rule, tokens);
      },
    };
    const quotas = createQuotas({ transport, clock: time, scheduler: neverScheduler });
    let admitted = 0;
    // 2 s of rounds every 50 ms, 5 requests offered per interval (a tenth of the limit)
    for (let round = 0; round < 40; round++) {
      time.set(1_000_000 + round * 50);
      await quotas.sync();
      for (let r = 0; r < 5; r++) if (quotas.check("search", "k").allowed) admitted++;
    }
    expect(granted.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    // a tenth of the limit offered, tokens granted every round: most of it admitted
    expect(admitted).toBeGreaterThan(100);
  });

  // Contract: docs/decisions/0037-quotas-one-allowance-per-key.md: "A check may therefore spend a strict token up to
  // one tick after the loop last looked; the loop treats a lease as ended one interval early, and converts
  // the store's expiries to local time from the moment the request was sent, so no token is spent after the
  // store's lease." docs/quotas.md: "treats a lease as ended one interval early (the next tick may be
  // late)". The next tick is scheduled only when the whole round has settled, and a round waits for every
  // slot group's call (up to the transport's timeout: 500 ms direct, 2,000 ms over HTTP); `sync()` during
  // a round returns that round. So one slow call of another rule keeps every strict key spending tokens
  // whose lease has ended, for as long as that call takes.
  it("no strict token is spent after its lease while a round waits for a slow call of another rule", async () => {
    const pay: QuotaRule = {
      mode: "strict",
      limits: [{ windowMs: 1_000, max: 5 }],
      leaseMs: 200,
      fallback: "deny",
      slotGroups: 1,
    };
    const feed: QuotaRule = { ...pay, mode: "approximate", limits: [{ windowMs: 1_000, max: 100 }], leaseMs: 1_000 };
    const time = manualClock(0);
    let releaseSlow: (() => void) | undefined;
    let hangSlow = false;
    const transport: QuotaTransport = {
      async sync(request, now) {
        if (request.rule === "feed") {
          if (hangSlow)
            await new Promise<void>((resolve) => {
              releaseSlow = resolve;
            });
          return storeReply(request, now, feed, 10);
        }
        // the store's answer for pay: 5 tokens at the first sync, none after (they are all reserved)
        return storeReply(request, now, pay, request.seq === 1 ? 5 : 0);
      },
    };
    const quotas = createQuotas({ transport, clock: time, scheduler: neverScheduler, rules: { pay, feed } });
    await quotas.checkFresh("pay", "k", 0);
    await quotas.checkFresh("feed", "x", 1);
    // tokens granted at 0, store lease until 200
    expect(quotas.check("pay", "k", 0).remaining).toBe(5);
    // the round at 50: pay's group is answered at once, feed's call hangs (a cold start, a slow node)
    time.set(50);
    hangSlow = true;
    quotas.check("pay", "k", 0);
    quotas.check("feed", "x");
    const round = quotas.sync();
    await new Promise((resolve) => setImmediate(resolve));
    // 1,000 ms: the store's lease ended 800 ms ago; the Lambda boundary or a caller asks for a round
    time.set(1_000);
    const again = quotas.sync();
    const spentAfterLease = [1, 2, 3, 4, 5].filter(() => quotas.check("pay", "k").allowed).length;
    releaseSlow?.();
    await Promise.all([round, again]);
    expect(spentAfterLease).toBe(0);
  });
});
