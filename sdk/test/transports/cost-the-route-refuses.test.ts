// Each test guards against a defect once found here, fixed since; its comment quotes the contract it broke.
// A cost the SDK accepts (a whole number >= 0, at most 2^53 - 1) that the HTTP route refuses.
// Contract (sdk/src/engine.ts, as the hostile-cost tests quote it): a key the wire cannot carry is
// refused "at first sight, with the field named: the sync would refuse it for the whole slot group"; and
// docs/quotas.md: httpTransport is "POST /v1/quotas/sync at url" with "the same request and reply as the
// direct transport". The route (syncRequestSchema, sdk/src/protocol/sync-schemas.ts) caps an
// entry's `offered` and `want` at 1,000,000,000 (docs/api.md: counts "go up to 1,000,000,000"), and
// answers 400 otherwise; the HTTP transport turns a 400 into SyncRejectedError, so the whole group's
// request is refused: every other key's strict spent tokens and refunds are dropped (the wire's rule for a
// refused request) and nothing of the group is replenished that round.
//
// Reproduction: strict rule, keys "a" and "b" in one slot group; "a" spends 3 of its tokens; one caller
// checks "b" with cost 1,000,000,001 (denied, as it should be). The next request carries
// offered = 1,000,000,001 for "b": the route refuses it (one round), and "a"'s 3 spent tokens are never
// reported (checked over 6 more rounds): the store stops counting them once their grant's lease ends.
import { describe, expect, it } from "vitest";
import { SyncRejectedError } from "../../src/errors.ts";
import type { QuotaRule, SyncReply, SyncRequest } from "../../src/protocol/index.ts";
import { syncRequestSchema } from "../../src/protocol/index.ts";
import { createQuotas, type QuotaTransport } from "../../src/quotas.ts";

const strict: QuotaRule = {
  mode: "strict",
  limits: [{ windowMs: 1_000, max: 1_000 }],
  leaseMs: 500,
  fallback: "deny",
  slotGroups: 1,
};

/** The route as the HTTP transport meets it: the request validated by the route's own schema (400 -> SyncRejectedError). */
function route() {
  const applied: SyncRequest[] = [];
  let refused = 0;
  const transport: QuotaTransport = {
    async sync(request, now): Promise<SyncReply> {
      const parsed = syncRequestSchema.safeParse(JSON.parse(JSON.stringify(request)));
      if (!parsed.success) {
        refused++;
        throw new SyncRejectedError(`POST /v1/quotas/sync: 400 ${parsed.error.message}`, { status: 400 });
      }
      applied.push(structuredClone(request));
      return {
        status: "applied",
        serverTime: now,
        configVersion: "v1",
        instances: 1,
        ...(request.configVersion === "v1" ? {} : { rule: strict }),
        entries: request.entries.map((e) => ({
          key: e.key,
          denyUntil: 0,
          resetAt: now + 1_000,
          used: [0],
          mode: "strict" as const,
          tokens: 10,
          leaseExpiresAt: now + strict.leaseMs,
        })),
      };
    },
  };
  return { transport, applied, refused: () => refused };
}

const never = { schedule: () => ({ cancel() {} }) };

describe("review8: a cost the SDK accepts and the HTTP route refuses", () => {
  // also with costs each within the route's range: two checks of 600,000,000 (a byte quota of 1 GB, two
  // uploads in one interval) make offered 1,200,000,000
  it.each([
    ["one check of cost 1,000,000,001", [1_000_000_001]],
    ["two checks of cost 600,000,000", [600_000_000, 600_000_000]],
  ] as const)(
    "%s on one key leaves its slot group's next request acceptable to the route (another key's spent tokens reported)",
    async (_, costs) => {
      let now = 1_000_000;
      const clock = { now: () => now };
      const r = route();
      const errors: Error[] = [];
      const quotas = createQuotas({
        transport: r.transport,
        clock,
        scheduler: never,
        rules: { q: strict },
        onError: (e) => errors.push(e),
      });
      await quotas.checkFresh("q", "a", 0);
      await quotas.checkFresh("q", "b", 0);
      let admitted = 0;
      for (let i = 0; i < 3; i++) if (quotas.check("q", "a").allowed) admitted++;
      expect(admitted).toBe(3);
      // the SDK accepts the cost (a whole number >= 0 below 2^53) and denies it, as it should
      for (const cost of costs) expect(quotas.check("q", "b", cost).allowed).toBe(false);
      const before = r.applied.length;
      now += 50;
      await quotas.sync();
      // the route refused the group's request: a's 3 spent tokens were in it
      expect(r.refused()).toBe(0);
      const reported = r.applied
        .slice(before)
        .flatMap((req) => req.entries)
        .filter((e) => e.key === "a")
        .flatMap((e) => e.usage)
        .reduce((sum, [, n]) => sum + n, 0);
      expect(reported).toBe(3);
    },
  );
});
