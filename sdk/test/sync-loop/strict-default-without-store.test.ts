// A strict rule written without a `fallback`, then the store stops answering (a 3 s CLIENT PAUSE or a
// killed primary): the SDK may spend only the tokens the store granted before, never a share nobody counts.
import { describe, expect, it } from "vitest";
import { compileQuotaRules } from "../../../functions/core/shared/quota-rules.ts";
import { StoreUnreachableError } from "../../src/errors.ts";
import { createQuotas, type QuotaTransport } from "../../src/quotas.ts";
import { manualClock, neverScheduler, storeReply } from "../support/quota-fixtures.ts";

describe("a strict rule's default without the store", () => {
  // Contract: docs/quotas.md: "`strict` never admits more than `max` in any window of W, under every fault:
  // without the store an instance spends only tokens the store counted", and "A strict rule defaults to
  // `fallback: "deny"`". The default used to be `share`: each instance admitted ⌊max / N⌋ per window on top
  // of the store's own grants after the fault (80 of 40 in one window).
  it("a strict rule set without a fallback admits no more than the tokens it held, and nothing once they are spent or expired", async () => {
    const compiled = compileQuotaRules("p1", [{ name: "pay", mode: "strict", limits: [{ window: "1s", max: 40 }] }]);
    const rule = compiled.get("pay")!.rule;
    const time = manualClock();
    let down = false;
    let granted = 0;
    const transport: QuotaTransport = {
      async sync(request, now) {
        if (down) throw new StoreUnreachableError("store paused");
        time.set(now + 1);
        const tokens = Math.min(8, Math.max(...request.entries.map((e) => e.want), 0));
        granted += tokens;
        return storeReply(request, now, rule, tokens, { instances: 2 });
      },
    };
    const quotas = createQuotas({ transport, clock: time, scheduler: neverScheduler });
    // healthy: a few rounds so the key holds tokens granted by the store
    let admittedHealthy = 0;
    for (let round = 0; round < 4; round++) {
      time.set(1_000_000 + round * 50);
      await quotas.sync();
      for (let r = 0; r < 2; r++) if (quotas.check("pay", "k").allowed) admittedHealthy++;
    }
    expect(admittedHealthy).toBeGreaterThan(0);
    const grantedBefore = granted;
    const spentBefore = admittedHealthy;
    // the store stops answering for 3 s; load keeps coming, 20 requests a tick
    down = true;
    let admittedDown = 0;
    let admittedLate = 0;
    for (let round = 4; round < 64; round++) {
      const at = 1_000_000 + round * 50;
      time.set(at);
      await quotas.sync();
      for (let r = 0; r < 20; r++) {
        if (!quotas.check("pay", "k").allowed) continue;
        admittedDown++;
        // a lease is 200 ms: past it, no token the store granted is left to spend
        if (at >= 1_000_000 + 4 * 50 + rule.leaseMs) admittedLate++;
      }
    }
    expect(granted).toBe(grantedBefore);
    expect(spentBefore + admittedDown).toBeLessThanOrEqual(grantedBefore);
    expect(admittedLate).toBe(0);
    expect(rule.fallback).toBe("deny");
    await quotas.stop();
  });
});
