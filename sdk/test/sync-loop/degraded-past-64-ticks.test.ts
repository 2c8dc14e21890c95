// Degraded mode past 64 ticks. The SDK's own ports only: a fake clock, a scheduler that never fires
// (rounds are started by hand), and a transport that encodes each request exactly as the direct transport
// does (wire.ts's encodeSync) and answers as the store would, or throws StoreUnreachableError while down
// (what a 503 from the check API, or a node that does not answer, gives the SDK).
import { describe, expect, it } from "vitest";
import { StoreUnreachableError } from "../../src/errors.ts";
import { encodeSync, type QuotaRule, type SyncReply } from "../../src/protocol/index.ts";
import { createQuotas, type QuotaTransport } from "../../src/quotas.ts";

const rule: QuotaRule = {
  mode: "approximate",
  limits: [
    { windowMs: 1_000, max: 1_000 },
    { windowMs: 86_400_000, max: 1_000_000 },
  ],
  leaseMs: 1_000,
  fallback: "share",
  slotGroups: 1,
};

describe("degraded for more than 64 ticks", () => {
  // Contract: docs/quotas.md, degraded mode: "Usage seen meanwhile is closed into epochs each tick (at most
  // 64 per key, the oldest merged at the later time ...) and reported when the store answers again."
  // After 64 ticks a key holds 64 epochs, the oldest carrying most of the outage's usage. When the store
  // answers the resent request, what the key admitted while that call was on the wire is one more epoch
  // in the next request: 65 pairs, which the wire refuses (MAX_EPOCHS_PER_KEY). The refused request is
  // given back to its key keeping the newest 64 pairs: the oldest epoch, with nearly all the outage's
  // usage, is dropped, and never counts in the day's window.
  it("after 120 ticks (6 s) without the store, everything admitted meanwhile is reported once it answers (a day-long limit counts it)", async () => {
    let now = 1_000_000;
    let down = false;
    let refused = 0;
    let reported = 0;
    let duringCall = () => {};
    const transport: QuotaTransport = {
      async sync(request, at): Promise<SyncReply> {
        if (down) throw new StoreUnreachableError("503 store_unavailable");
        // requests that arrive while this call is on the wire
        duringCall();
        try {
          encodeSync("tg", request, at);
        } catch (error) {
          refused++;
          throw error;
        }
        for (const e of request.entries) for (const [, count] of e.usage) reported += count;
        return {
          status: "applied",
          serverTime: at,
          configVersion: "v1",
          instances: 1,
          ...(request.configVersion === "v1" ? {} : { rule }),
          entries: request.entries.map((e) => ({
            mode: "approximate" as const,
            key: e.key,
            allowance: 40,
            validUntil: at + 1_000,
            denyUntil: 0,
            resetAt: at + 1_000,
            used: [0, 0],
          })),
        };
      },
    };
    const quotas = createQuotas({
      transport,
      clock: { now: () => now },
      scheduler: { schedule: () => ({ cancel() {} }) },
    });
    await quotas.checkFresh("api", "k", 0);
    let admitted = 0;
    const round = async () => {
      // ten requests per interval, admitted under the kept allowance, then the safe share
      for (let i = 0; i < 10; i++) if (quotas.check("api", "k").allowed) admitted++;
      now += 50;
      await quotas.sync();
    };
    down = true;
    for (let tick = 0; tick < 120; tick++) await round();
    down = false;
    // the first answered call (the resent request): two requests arrive while it is on the wire
    duringCall = () => {
      for (let i = 0; i < 2; i++) if (quotas.check("api", "k").allowed) admitted++;
      duringCall = () => {};
    };
    for (let tick = 0; tick < 10; tick++) await round();
    // everything admitted was reported once the store answered (the last round's request included)
    expect({ refused, reported }).toEqual({ refused: 0, reported: admitted });
  });
});
