// Each test guards against a defect once found here, fixed since; its comment quotes the contract it broke.
// The sync loop under a changing world: the wall clock stepped back, more keys than maxKeys, and an
// operator's change of slotGroups while a request is unanswered. The SDK's own ports only: a fake clock, a
// scheduler that never fires (rounds are started by hand), and transports written here that answer as
// lua/quota-sync/ does.
import { describe, expect, it } from "vitest";
import { StoreUnreachableError } from "../../src/errors.ts";
import type { QuotaRule } from "../../src/protocol/index.ts";
import { createQuotas, type QuotaTransport } from "../../src/quotas.ts";
import { manualClock, neverScheduler, storeReply } from "../support/quota-fixtures.ts";

const approximate: QuotaRule = {
  mode: "approximate",
  limits: [{ windowMs: 1_000, max: 100 }],
  leaseMs: 1_000,
  fallback: "deny",
  slotGroups: 1,
};

describe("the wall clock stepped back", () => {
  // Contract: DECISIONS, "One allowance per key": the loop "converts the store's expiries to local time from
  // the moment the request was sent, so no token is spent after the store's lease"; docs/quotas.md:
  // "`strict` mode never admits more than the limit in any window of W". Over HTTP the store's time is the
  // check API's clock, not the instance's. The SDK keeps a lease's end as a wall-clock time (Date.now by
  // default), so an NTP step back of 10 s on the instance keeps its tokens for 10 s past the store's lease,
  // after the store has let them go and granted the capacity again.
  it("strict: tokens granted before the instance's clock is stepped back 10 s are not spent 1 s later (their 200 ms lease has long ended)", async () => {
    const pay: QuotaRule = { ...approximate, mode: "strict", leaseMs: 200 };
    const wall = manualClock(1_000_000);
    // the store's clock (the check API's) runs on true time
    let trueTime = 1_000_000;
    const transport: QuotaTransport = {
      async sync(request) {
        return storeReply(request, trueTime, pay, request.seq === 1 ? 5 : 0);
      },
    };
    const quotas = createQuotas({ transport, clock: wall, scheduler: neverScheduler, rules: { pay } });
    await quotas.checkFresh("pay", "k", 0);
    expect(quotas.check("pay", "k", 0).remaining).toBe(5);
    // NTP steps the wall clock back 10 s; 1 s of true time passes with rounds every 50 ms
    for (let t = 50; t <= 1_000; t += 50) {
      trueTime = 1_000_000 + t;
      wall.set(1_000_000 - 10_000 + t);
      await quotas.sync();
    }
    expect(quotas.check("pay", "k").allowed).toBe(false);
  });
});

describe("more keys than maxKeys", () => {
  // Contract: docs/quotas.md: "`quotas.checkFresh(rule, key, cost)` Awaits one sync first when the key
  // never had an allowance here (the Lambda middleware uses it)"; quotas.ts: "a key that never had an
  // allowance on this instance is synced first, so its first request is decided by the store's allowance
  // rather than the fallback"; engine.ts: "Idle, unpinned keys beyond this many are dropped". A new key's
  // handle starts with lastActive = 0 (idle since 1970), so when the instance holds more keys than maxKeys
  // the very sync checkFresh awaits drops the key it was made for: the key is not sent, the request is
  // decided by the fallback, and whatever it admits is recorded on a handle no longer in the engine (never
  // reported).
  it("checkFresh of a new key, with the instance over maxKeys: the key is synced and decided by the store's allowance", async () => {
    const rule: QuotaRule = { ...approximate, fallback: "share" };
    const time = manualClock(1_000_000);
    const sent: string[] = [];
    const transport: QuotaTransport = {
      async sync(request, now) {
        sent.push(...request.entries.map((e) => e.key));
        return storeReply(request, now, rule, 10);
      },
    };
    const quotas = createQuotas({ transport, clock: time, scheduler: neverScheduler, maxKeys: 1, instancesHint: 1 });
    await quotas.checkFresh("api", "a");
    time.set(1_000_050);
    const decision = { ...(await quotas.checkFresh("api", "b")) };
    // b was sent, and its first request was decided by the allowance of 10 (9 left after it)
    expect({ sent: sent.includes("b"), remaining: decision.remaining }).toEqual({ sent: true, remaining: 9 });
  });
});

describe("an operator's change of slotGroups while a request is unanswered", () => {
  // Contract: docs/quotas.md, "Idempotency": "A request that got no answer is sent again as is (same
  // sequence number, same entries) until it is answered"; degraded mode "reports usage seen meanwhile when
  // the store returns". A reply of group 0 brings slotGroups 1 while group 1's request is unanswered: the
  // rule keeps only group 0, and group 1's request, with its usage, is never sent again.
  it("usage in an unanswered request of a slot group the new definition drops is still reported", async () => {
    const two: QuotaRule = { ...approximate, slotGroups: 2 };
    const one: QuotaRule = { ...approximate, slotGroups: 1 };
    const time = manualClock(1_000_000);
    let current = { rule: two, version: "v2" };
    let failGroup1 = false;
    const reported = new Map<string, number>();
    const transport: QuotaTransport = {
      async sync(request, now) {
        if (failGroup1 && request.group === 1) throw new StoreUnreachableError("no reply");
        for (const e of request.entries) {
          const count = e.usage.reduce((n, [, c]) => n + c, 0);
          reported.set(e.key, (reported.get(e.key) ?? 0) + count);
        }
        return storeReply(request, now, current.rule, 50, { version: current.version });
      },
    };
    const quotas = createQuotas({ transport, clock: time, scheduler: neverScheduler });
    // five keys over slotGroups 2, each with an allowance; a is one of group 0, b one of group 1
    const keys = ["k0", "k1", "k2", "k3", "k4"];
    for (const key of keys) await quotas.checkFresh("api", key, 0);
    const groups = quotas.engine.rule("api")!.groups;
    expect(groups).toHaveLength(2);
    const inGroup = (g: number) => keys.find((k) => [...groups[g]!.handles].some((h) => h.key === k))!;
    const [a, b] = [inGroup(0), inGroup(1)];
    // 7 admitted on b: its group's request goes unanswered; then the operator sets slotGroups to 1
    for (let i = 0; i < 7; i++) quotas.check("api", b);
    quotas.check("api", a);
    failGroup1 = true;
    current = { rule: one, version: "v3" };
    time.set(1_000_050);
    await quotas.sync();
    // the store answers every call from now on
    failGroup1 = false;
    for (let t = 100; t <= 500; t += 50) {
      time.set(1_000_000 + t);
      quotas.check("api", b, 0);
      await quotas.sync();
    }
    expect(reported.get(b)).toBe(7);
  });
});

describe("checkFresh called concurrently", () => {
  // Contract: docs/quotas.md: "`quotas.check(rule, key, cost = 1)`: A `Decision` ...; one object per
  // `Quotas`, overwritten by the next call (copy what you keep)"; "`quotas.checkFresh(rule, key, cost)`:
  // Awaits one sync first when the key never had an allowance here". checkFresh resolves with the shared
  // object, and a second checkFresh waiting on the same round decides (and overwrites it) before the first
  // caller's await returns: a caller that copies the decision the moment its await returns reads the
  // other key's decision. A key the store denies is admitted when another key's request is allowed.
  it("two keys checked fresh at once: each caller, copying at once, reads its own key's decision", async () => {
    const time = manualClock(1_000_000);
    const transport: QuotaTransport = {
      async sync(request, now) {
        const reply = storeReply(request, now, approximate, 10);
        // the store has nothing left for "denied"
        for (const entry of reply.entries)
          if (entry.key === "denied" && entry.mode === "approximate") entry.allowance = 0;
        return reply;
      },
    };
    const quotas = createQuotas({ transport, clock: time, scheduler: neverScheduler, rules: { api: approximate } });
    const first = quotas.checkFresh("api", "denied");
    const second = quotas.checkFresh("api", "allowed");
    const denied = { ...(await first) };
    const allowed = { ...(await second) };
    expect({ denied: denied.allowed, allowed: allowed.allowed }).toEqual({ denied: false, allowed: true });
  });
});

describe("stop after a failed round", () => {
  // Contract: docs/quotas.md: "`quotas.start()` / `await quotas.stop()`: The timer loop ... / stop it and
  // report what is left"; quotas.ts: "Stops the loop and reports the usage still unreported (one last
  // round)". When the round before stop() went unanswered, the last round only resends that request (same
  // seq, same entries), and what was admitted since is never reported: the process ends with it.
  it("stop() after an unanswered round reports everything admitted, the requests admitted since included", async () => {
    const time = manualClock(1_000_000);
    let down = false;
    let reported = 0;
    const transport: QuotaTransport = {
      async sync(request, now) {
        if (down) throw new StoreUnreachableError("no reply");
        for (const e of request.entries) for (const [, count] of e.usage) reported += count;
        return storeReply(request, now, approximate, 50);
      },
    };
    const quotas = createQuotas({ transport, clock: time, scheduler: neverScheduler, rules: { api: approximate } });
    await quotas.checkFresh("api", "k", 0);
    let admitted = 0;
    for (let i = 0; i < 5; i++) if (quotas.check("api", "k").allowed) admitted++;
    down = true;
    time.set(1_000_050);
    await quotas.sync();
    for (let i = 0; i < 7; i++) if (quotas.check("api", "k").allowed) admitted++;
    down = false;
    time.set(1_000_100);
    await quotas.stop();
    expect({ admitted, reported }).toEqual({ admitted: 12, reported: 12 });
  });
});

describe("an operator adds a rule clients already call", () => {
  // Contract: docs/quotas.md, measured against its target: "An operator's change reaches all clients
  // (N = 16) ... 45 ms ... ≤ 1 s"; the loop's interval is jittered ±20 % (rounds up to 60 ms apart). After a
  // `norule` answer the engine does not ask for the rule again for NORULE_RETRY_MS (1,000 ms), and the
  // next round after that comes up to an interval later: a rule added just after a `norule` reaches the
  // client after more than 1 s.
  it("a rule added 1 ms after a client was answered norule reaches it within 1 s, rounds 60 ms apart", async () => {
    const time = manualClock(1_000_000);
    let defined = false;
    const transport: QuotaTransport = {
      async sync(request, now) {
        if (!defined) return { status: "norule", serverTime: now, configVersion: "", instances: 0, entries: [] };
        return storeReply(request, now, approximate, 10);
      },
    };
    const quotas = createQuotas({ transport, clock: time, scheduler: neverScheduler, unknownRule: "deny" });
    await quotas.checkFresh("api", "k", 0);
    // the operator adds the rule at 1 ms; rounds every 60 ms (the jitter's longest interval)
    defined = true;
    let reachedAt = -1;
    for (let t = 60; t <= 1_200 && reachedAt < 0; t += 60) {
      time.set(1_000_000 + t);
      quotas.check("api", "k", 0);
      await quotas.sync();
      if (quotas.engine.rule("api")?.configVersion === "v1") reachedAt = t;
    }
    expect(reachedAt).toBeGreaterThan(0);
    expect(reachedAt).toBeLessThanOrEqual(1_000);
  });
});
