// Strict's early requests (a key that runs dry asks again at an observation, before its tick):
// what the early round does to the other slot groups and rules of the instance, and that it never puts
// two calls of one group on the wire. The SDK's own ports: a clock the test moves, no real timers.
import { describe, expect, it } from "vitest";
import { StoreUnreachableError } from "../../src/errors.ts";
import { createQuotas, type Quotas } from "../../src/index.ts";
import { type QuotaRule, type SyncReply, type SyncRequest, slotGroupOf } from "../../src/protocol/index.ts";
import type { QuotaHandle } from "../../src/state.ts";
import { neverScheduler, storeReply } from "../support/quota-fixtures.ts";

const strict2: QuotaRule = {
  mode: "strict",
  limits: [{ windowMs: 1_000, max: 1_000 }],
  leaseMs: 200,
  fallback: "deny",
  slotGroups: 2,
};

const approximate: QuotaRule = {
  mode: "approximate",
  limits: [{ windowMs: 1_000, max: 1_000 }],
  leaseMs: 1_000,
  fallback: "share",
  slotGroups: 1,
};

/** A key of `rule`'s slot group `group`. */
function keyIn(group: number, groups: number): string {
  for (let i = 0; ; i++) if (slotGroupOf(`k${i}`, groups) === group) return `k${i}`;
}

/** The store grants each strict key exactly what it asked (never a short grant), approximate 100. */
function exactReply(request: SyncRequest, now: number, rule: QuotaRule): SyncReply {
  const reply = storeReply(request, now, rule, 100);
  reply.entries.forEach((assignment, i) => {
    if (assignment.mode === "strict") assignment.tokens = request.entries[i]!.want;
  });
  return reply;
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

/** Spends every token `handle` holds, then denies once: the key has run dry. */
function drain(quotas: Quotas, handle: QuotaHandle): number {
  let admitted = 0;
  while (quotas.checkHandle(handle).allowed) admitted++;
  return admitted;
}

describe("review10: strict early requests and the other groups", () => {
  // Breaks the engine's and the docs' rule for unanswered requests: docs/quotas.md "asks again at the next
  // observation ... never while a request is unanswered" and sdk/src/engine.ts observe(): "a request left
  // unanswered (the store away) goes again at the tick, not sooner". The check only looks at the dry key's
  // own group; the early round it starts is a whole round (Quotas.sync), which resends every other group's
  // unanswered request too. One primary away and one dry key elsewhere: that primary gets a retry every
  // F/2 (each observation that finds the key dry again) instead of every tick.
  it("a dry key's early round does not resend another slot group's unanswered request before the tick", async () => {
    let wall = 1_000_000;
    const calls = [0, 0];
    let groupOneDown = false;
    const quotas = createQuotas({
      transport: {
        async sync(request, now) {
          calls[request.group] = (calls[request.group] ?? 0) + 1;
          if (request.group === 1 && groupOneDown) throw new StoreUnreachableError("primary away");
          return exactReply(request, now, strict2);
        },
      },
      clock: { now: () => wall, monotonic: () => wall },
      scheduler: neverScheduler,
      rules: { api: strict2 },
      instancesHint: 1,
    });
    const a = quotas.resolve("api", keyIn(0, 2));
    const b = quotas.resolve("api", keyIn(1, 2));
    await quotas.sync(); // both keys' first requests
    for (let i = 0; i < 3; i++) quotas.checkHandle(a); // demand: denied (no token yet)
    quotas.checkHandle(b);
    wall += 50;
    groupOneDown = true;
    await quotas.sync(); // group 0: a gets what it asked; group 1: no answer, its request stays pending
    expect(a.left).toBeGreaterThan(0);
    const groupOneCalls = calls[1];
    drain(quotas, a); // a runs dry and denies
    wall += 25; // F/2 after group 0's request
    quotas.observe();
    await settle();
    expect(calls[0]).toBe(3); // the early request of a's group: as designed
    expect(calls[1]).toBe(groupOneCalls); // group 1's unanswered request waits for the tick
  });

  // Breaks docs/quotas.md's opening "one round trip per slot group, every 50 ms by default" and "The sync
  // loop. Each interval ... for each slot group with something to say ... sends one request": the early
  // request is meant for the dry key's group ("no sooner than F/2 after its group's last request"), but the
  // round it starts sends every group of every rule with something to say. An approximate rule (which has
  // no early requests at all) then syncs at every early round of any strict key of the instance: twice an
  // interval while one strict key keeps running dry, whatever the number of groups and rules.
  it("a strict key's early request sends no request for an approximate rule between its ticks", async () => {
    let wall = 1_000_000;
    const byRule = new Map<string, number>();
    const rules: Record<string, QuotaRule> = { api: { ...strict2, slotGroups: 1 }, web: approximate };
    const quotas = createQuotas({
      transport: {
        async sync(request, now) {
          byRule.set(request.rule, (byRule.get(request.rule) ?? 0) + 1);
          return exactReply(request, now, rules[request.rule]!);
        },
      },
      clock: { now: () => wall, monotonic: () => wall },
      scheduler: neverScheduler,
      rules,
      instancesHint: 1,
    });
    const a = quotas.resolve("api", "hot");
    const w = quotas.resolve("web", "page");
    await quotas.sync();
    for (let i = 0; i < 3; i++) quotas.checkHandle(a);
    quotas.checkHandle(w);
    wall += 50;
    await quotas.sync(); // tick: both rules' requests
    const webAtTick = byRule.get("web");
    quotas.checkHandle(w); // web has traffic, as every busy rule does
    drain(quotas, a);
    wall += 25;
    quotas.observe(); // api's early request
    await settle();
    expect(byRule.get("api")).toBe(3);
    expect(byRule.get("web")).toBe(webAtTick); // web waits for its tick
  });

  it("an observation never puts a second call of a group on the wire while its tick's call is out", async () => {
    let wall = 1_000_000;
    let inFlight = 0;
    let most = 0;
    const pending: Array<() => void> = [];
    let hold = false;
    const rule = { ...strict2, slotGroups: 1 };
    const quotas = createQuotas({
      transport: {
        async sync(request, now) {
          inFlight++;
          most = Math.max(most, inFlight);
          if (hold) await new Promise<void>((resolve) => pending.push(resolve));
          inFlight--;
          return exactReply(request, now, rule);
        },
      },
      clock: { now: () => wall, monotonic: () => wall },
      scheduler: neverScheduler,
      rules: { api: rule },
      instancesHint: 1,
    });
    const a = quotas.resolve("api", "hot");
    await quotas.sync();
    for (let i = 0; i < 3; i++) quotas.checkHandle(a);
    wall += 50;
    await quotas.sync();
    drain(quotas, a);
    wall += 50;
    hold = true;
    const tick = quotas.sync(); // its call hangs
    await settle();
    for (let i = 0; i < 10; i++) {
      quotas.checkHandle(a);
      wall += 10;
      quotas.observe();
      await settle();
    }
    expect(most).toBe(1);
    hold = false;
    for (const resolve of pending.splice(0)) resolve();
    await tick;
  });

  it("stop() after observations and an early round leaves no timer behind (nothing holds a Lambda invocation open)", async () => {
    let wall = 1_000_000;
    const timers: Array<{ delay: number; run: () => void; live: boolean }> = [];
    const scheduler = {
      schedule(delay: number, run: () => void) {
        const timer = { delay, run, live: true };
        timers.push(timer);
        return {
          cancel() {
            timer.live = false;
          },
        };
      },
    };
    const fire = (delay: number) => {
      const timer = timers.find((t) => t.live && t.delay === delay);
      if (!timer) throw new Error(`no live ${delay} ms timer`);
      timer.live = false;
      timer.run();
    };
    const rule = { ...strict2, slotGroups: 1 };
    let calls = 0;
    const quotas = createQuotas({
      transport: {
        async sync(request, now) {
          calls++;
          return exactReply(request, now, rule);
        },
      },
      clock: { now: () => wall, monotonic: () => wall },
      scheduler,
      rules: { api: rule },
      instancesHint: 1,
      jitter: 0,
    }).start();
    const a = quotas.resolve("api", "hot");
    await quotas.sync();
    for (let i = 0; i < 3; i++) quotas.checkHandle(a);
    wall += 50;
    fire(50); // the tick
    await settle();
    drain(quotas, a);
    for (let i = 0; i < 3; i++) {
      wall += 10;
      fire(10); // observations: the third finds a dry 30 ms after its request
      await settle();
    }
    expect(calls).toBe(3);
    await quotas.stop();
    expect(timers.filter((t) => t.live)).toEqual([]);
  });
});
