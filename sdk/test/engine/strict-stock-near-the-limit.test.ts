// Strict stock near the limit, on the engine alone (time by hand, replies built as the store sends them): a key
// decided by `decide` asks for what waits and nothing ahead once the store has little left, so no token it
// holds idle counts in a window where another instance's request is denied; a key decided by `check` alone
// keeps its stock (it has no other way to get tokens).
import { describe, expect, it } from "vitest";
import { QuotaEngine } from "../../src/engine.ts";
import type { QuotaRule, SyncReply, SyncRequest } from "../../src/protocol/index.ts";

const F = 50;
const pay: QuotaRule = {
  mode: "strict",
  limits: [{ windowMs: 1_000, max: 100 }],
  leaseMs: 200,
  fallback: "deny",
  slotGroups: 1,
};

/** The store's answer: `tokens` granted, `used` counted in the window after the grant, 3 instances. */
function reply(request: SyncRequest, serverTime: number, tokens: number, used: number): SyncReply {
  return {
    status: "applied",
    serverTime,
    configVersion: "v1",
    instances: 3,
    entries: request.entries.map((entry) => ({
      key: entry.key,
      mode: "strict" as const,
      tokens,
      leaseExpiresAt: serverTime + 200,
      denyUntil: 0,
      resetAt: serverTime + 800,
      used: [used],
    })),
  };
}

/**
 * Rounds of 50 ms at about 0.6 requests per ms offered to one key, each answered with what it asked for and the
 * store's window at `used`; `waiting` requests await each round (what `decide` adds). The last request's want.
 */
function lastWant(used: number, waiting: number): number {
  const e = new QuotaEngine({ instanceId: "i-1", rules: { pay }, syncIntervalMs: F });
  const h = e.resolve("pay", "k");
  const g = e.rule("pay")!.groups[0]!;
  let want = 0;
  for (let round = 0; round <= 8; round++) {
    const now = round * F;
    e.advance(now);
    for (let i = 0; i < 30; i++) e.checkHandle(h);
    h.waiting += waiting;
    const request = e.takeRequest(g, now)!;
    want = request.entries[0]!.want;
    e.applyReply(g, reply(request, 10_000 + now, want, used), now, now);
  }
  return want;
}

describe("strict stock near the limit", () => {
  it("a key decided on demand asks for what waits and no stock ahead once the store has less left than the fleet's stock", () => {
    // 3 left after the grant: the fleet's stock at this rate (3 × about 23) would strand tokens in the window
    expect(lastWant(97, 1)).toBe(1);
  });

  it("the same key far from the limit keeps asking for its rate's stock", () => {
    expect(lastWant(10, 1)).toBeGreaterThan(10);
  });

  it("a key decided by check alone keeps its stock near the limit (it has no other way to get tokens)", () => {
    expect(lastWant(97, 0)).toBeGreaterThan(10);
  });
});
