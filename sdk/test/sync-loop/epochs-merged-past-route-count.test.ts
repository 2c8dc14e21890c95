// Each test guards against a defect once found here, fixed since; its comment quotes the contract it broke.
// Epochs merged past 64 per key can exceed the count the route accepts, and then the slot group never
// syncs again.
// Contract (commit 1955999, docs/decisions/0037-quotas-one-allowance-per-key.md): "epochs past 64 per key merge (oldest two at the
// later time) wherever a request is built or given back, never dropped"; sdk/src/engine.ts: a key the wire
// cannot carry is refused "at first sight, with the field named: the sync would refuse it for the whole slot
// group"; docs/api.md: counts "go up to 1,000,000,000" (the route's syncRequestSchema: usage counts, offered
// and want at most 1,000,000,000, else 400).
//
// Reproduction: an approximate rule (max 1,000,000,000 per hour, fallback allow: a byte quota), a store that
// stops answering for 200 ticks while the key admits 50,000,000 a tick (each request within every bound).
// More than 64 epochs merge, the oldest into one of more than 1,000,000,000; when the store is back, the
// route refuses every request of the group (400): 99 of 100 rounds after the outage, for good. The outage's
// usage is never reported, and another key of the same group (10 admitted) is never reported or replenished
// either.
import { describe, expect, it } from "vitest";
import { StoreUnreachableError, SyncRejectedError } from "../../src/errors.ts";
import type { QuotaRule, SyncReply, SyncRequest } from "../../src/protocol/index.ts";
import { syncRequestSchema } from "../../src/protocol/index.ts";
import { createQuotas, type QuotaTransport } from "../../src/quotas.ts";

const bytes: QuotaRule = {
  mode: "approximate",
  limits: [{ windowMs: 3_600_000, max: 1_000_000_000 }],
  leaseMs: 1_000,
  fallback: "allow",
  slotGroups: 1,
};

/** The HTTP route as the SDK meets it: its own schema (400 -> SyncRejectedError), or no answer while down. */
function route() {
  const state = { down: false, refused: 0, applied: [] as SyncRequest[] };
  const transport: QuotaTransport = {
    async sync(request, now): Promise<SyncReply> {
      if (state.down) throw new StoreUnreachableError("no answer");
      if (!syncRequestSchema.safeParse(JSON.parse(JSON.stringify(request))).success) {
        state.refused++;
        throw new SyncRejectedError("POST /v1/quotas/sync: 400", { status: 400 });
      }
      state.applied.push(structuredClone(request));
      return {
        status: "applied",
        serverTime: now,
        configVersion: "v1",
        instances: 1,
        ...(request.configVersion === "v1" ? {} : { rule: bytes }),
        entries: request.entries.map((e) => ({
          key: e.key,
          denyUntil: 0,
          resetAt: now + 1_000,
          used: [0],
          mode: "approximate" as const,
          allowance: 100_000_000,
          validUntil: now + 1_000,
        })),
      };
    },
  };
  return { transport, state };
}

describe("review8: merged epochs past the route's count", () => {
  it("after a long outage the group syncs again: the outage's usage and another key's are reported", async () => {
    let now = 1_000_000;
    const r = route();
    const quotas = createQuotas({
      transport: r.transport,
      clock: { now: () => now },
      scheduler: { schedule: () => ({ cancel() {} }) },
      rules: { q: bytes },
      onError: () => {},
    });
    await quotas.checkFresh("q", "big", 0);
    await quotas.checkFresh("q", "small", 0);
    r.state.down = true;
    let admitted = 0;
    for (let i = 0; i < 200; i++) {
      now += 50;
      if (quotas.check("q", "big", 50_000_000).allowed) admitted += 50_000_000;
      await quotas.sync();
    }
    for (let i = 0; i < 10; i++) quotas.check("q", "small");
    r.state.down = false;
    const before = r.state.applied.length;
    for (let i = 0; i < 100; i++) {
      now += 50;
      await quotas.sync();
    }
    const reportedOf = (key: string) =>
      r.state.applied
        .slice(before)
        .flatMap((req) => req.entries)
        .filter((e) => e.key === key)
        .flatMap((e) => e.usage)
        .reduce((sum, [, n]) => sum + n, 0);
    expect(admitted).toBeGreaterThan(1_000_000_000);
    expect(reportedOf("small")).toBe(10);
    expect(reportedOf("big")).toBeGreaterThanOrEqual(admitted);
    expect(r.state.refused).toBeLessThan(100);
  });
});
