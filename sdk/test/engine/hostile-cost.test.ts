// Each test guards against a defect once found here, fixed since; its comment quotes the contract it broke.
// Hostile `cost` values given to `check` (a caller's `cost(request)` that returns NaN, a negative, a
// fraction, a number past 2^53). The SDK's own ports only: a fake clock, a fake scheduler that never runs,
// and a transport that encodes each request exactly as the direct transport does (wire.ts's encodeSync)
// before answering as the store would.
import { describe, expect, it } from "vitest";
import { QuotasArgumentError } from "../../src/errors.ts";
import { encodeSync, type QuotaRule, type SyncReply, type SyncRequest } from "../../src/protocol/index.ts";
import { createQuotas, type QuotaTransport } from "../../src/quotas.ts";
import { manualClock, neverScheduler, storeReply } from "../support/quota-fixtures.ts";

const strict: QuotaRule = {
  mode: "strict",
  limits: [{ windowMs: 1_000, max: 5 }],
  leaseMs: 500,
  fallback: "deny",
  slotGroups: 1,
};
const approximate: QuotaRule = {
  mode: "approximate",
  limits: [{ windowMs: 1_000, max: 1_000 }],
  leaseMs: 1_000,
  fallback: "deny",
  slotGroups: 1,
};

/**
 * A store that grants every key `amount` (tokens or allowance), after encoding the request as the direct
 * transport does: a request the wire refuses rejects the call (as redisTransport's would), nothing counted.
 */
function store(rule: QuotaRule, amount: number) {
  const applied: SyncRequest[] = [];
  let refused = 0;
  const transport: QuotaTransport = {
    async sync(request, now): Promise<SyncReply> {
      try {
        encodeSync("tg", request, now);
      } catch (error) {
        refused++;
        throw error;
      }
      applied.push(structuredClone(request));
      return storeReply(request, now, rule, amount);
    },
  };
  return { transport, applied, refused: () => refused };
}

function admittedOf(quotas: ReturnType<typeof createQuotas>, rule: string, key: string, attempts: number): number {
  let admitted = 0;
  for (let i = 0; i < attempts; i++) if (quotas.check(rule, key).allowed) admitted++;
  return admitted;
}

describe("check with a hostile cost", () => {
  // Contract (docs/quotas.md, DECISIONS "strict"): `strict` never admits more than `max` in any window; a
  // key holds what it was granted ("a key without tokens is denied"); approximate keys spend their
  // allowance and are denied past it. A NaN cost compares false with everything, so `left < cost` never
  // denies: the request is admitted, `left` becomes NaN, and every later request of the key is admitted.
  // Fixed: a cost that is not a whole number >= 0 is refused (QuotasArgumentError naming `cost`) and
  // changes nothing.
  it.each([
    ["strict", strict],
    ["approximate", approximate],
  ] as const)("%s: a NaN cost never admits, and never leaves the key admitting without limit", async (_, rule) => {
    const s = store(rule, 5);
    const quotas = createQuotas({
      transport: s.transport,
      clock: manualClock(),
      scheduler: neverScheduler,
      rules: { q: rule },
    });
    await quotas.checkFresh("q", "k", 0);
    expect(() => quotas.check("q", "k", Number.NaN)).toThrow(QuotasArgumentError);
    expect(() => quotas.check("q", "k", Number.NaN)).toThrow(/^cost: /);
    // 5 held: at most 5 more requests of cost 1 until the next sync
    expect(admittedOf(quotas, "q", "k", 100)).toBe(5);
  });

  it("strict: a negative cost never adds to what the key may admit (5 tokens, one check of cost -100)", async () => {
    const s = store(strict, 5);
    const quotas = createQuotas({
      transport: s.transport,
      clock: manualClock(),
      scheduler: neverScheduler,
      rules: { q: strict },
    });
    await quotas.checkFresh("q", "k", 0);
    expect(() => quotas.check("q", "k", -100)).toThrow(QuotasArgumentError);
    // the instance holds 5 tokens of a limit of 5: 100 requests of cost 1 may admit 5 at most
    expect(admittedOf(quotas, "q", "k", 100)).toBeLessThanOrEqual(5);
  });

  // Contract: engine.ts refuses a key the wire cannot carry "at first sight, with the field named: the sync
  // would refuse it for the whole slot group"; docs/quotas.md: "a sync loop reports usage and brings back
  // allowances in one round trip per slot group"; DECISIONS: "encodeSync refuses anything but whole numbers
  // >= 0 up to 2^53". A cost the wire cannot carry (here a fraction admitted, or an infinite cost denied,
  // which makes a strict key's rate and `want` infinite for good) is put in every later request of the
  // group: each is refused before it is sent, given back, and refused again, so no key of the group is
  // ever reported or replenished again.
  it.each([
    ["approximate", 0.5, approximate],
    ["strict", 0.5, strict],
    ["strict", Number.POSITIVE_INFINITY, strict],
  ] as const)(
    "%s: one check of cost %s on one key leaves its slot group syncing (another key's usage reported, allowances renewed)",
    async (_, cost, rule) => {
      const s = store(rule, 10);
      const time = manualClock();
      const quotas = createQuotas({
        transport: s.transport,
        clock: time,
        scheduler: neverScheduler,
        rules: { q: rule },
      });
      await quotas.checkFresh("q", "bad", 0);
      await quotas.checkFresh("q", "good", 0);
      expect(() => quotas.check("q", "bad", cost)).toThrow(QuotasArgumentError);
      let goodAdmitted = 0;
      for (let round = 0; round < 5; round++) {
        goodAdmitted += admittedOf(quotas, "q", "good", 10);
        time.advance(50);
        await quotas.sync();
      }
      const reported = s.applied
        .flatMap((r) => r.entries)
        .filter((e) => e.key === "good")
        .reduce((sum, e) => sum + e.usage.reduce((n, [, count]) => n + count, 0), 0);
      // each round's 10 requests of "good" fit its renewed 10 and are reported to the store
      expect({ goodAdmitted, reported, refused: s.refused() }).toEqual({ goodAdmitted: 50, reported: 50, refused: 0 });
    },
  );
});
