// Strict spend stamps: between ticks the loop notes what each key has spent (`observe`), and the next
// request reports each spend with its age (`spentAgo`). The store dates them at its now less that age, so
// an age must never make a spend look older than it is: whatever the observations, the wall clock's
// steps, lost replies (resent as is), error replies (spends dropped) and stale ones (spends sent again).
// The SDK's own ports only: a clock with a monotonic side the test moves, a scheduler that never fires.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { StoreUnreachableError, SyncRejectedError } from "../../src/errors.ts";
import { createQuotas } from "../../src/index.ts";
import type { QuotaRule, SyncReply, SyncRequest } from "../../src/protocol/index.ts";
import { neverScheduler, storeReply } from "../support/quota-fixtures.ts";

const rule: QuotaRule = {
  mode: "strict",
  limits: [{ windowMs: 1_000, max: 1_000 }],
  leaseMs: 200,
  fallback: "deny",
  slotGroups: 1,
};

type Outcome = "ok" | "lost" | "lostApplied" | "error" | "errorApplied" | "stale";
type Step =
  | { kind: "check"; n: number }
  | { kind: "wait"; ms: number }
  | { kind: "step"; ms: number }
  | { kind: "observe" }
  | { kind: "sync"; outcome: Outcome; tokens: number };

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ kind: fc.constant("check" as const), n: fc.integer({ min: 1, max: 4 }) }),
  fc.record({ kind: fc.constant("wait" as const), ms: fc.integer({ min: 0, max: 30 }) }),
  // the wall clock stepping (NTP), either way; the monotonic clock never does
  fc.record({ kind: fc.constant("step" as const), ms: fc.integer({ min: -80, max: 80 }) }),
  fc.record({ kind: fc.constant("observe" as const) }),
  fc.record({
    kind: fc.constant("sync" as const),
    outcome: fc.constantFrom<Outcome>("ok", "ok", "ok", "lost", "lostApplied", "error", "errorApplied", "stale"),
    tokens: fc.integer({ min: 0, max: 6 }),
  }),
);

describe("strict spend stamps", () => {
  it("never date a spend before it happened: tokens reported spent by any time x are at most those admitted by x", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(stepArb, { minLength: 1, maxLength: 80 }), async (steps) => {
        let wall = 1_000_000;
        let mono = 5_000;
        const clock = { now: () => wall, monotonic: () => mono };
        const applied = new Set<number>();
        // every spend the store would count: [its stamp on the monotonic clock, count]
        const counted: Array<[number, number]> = [];
        const admitted: number[] = [];
        let outcome: Outcome = "ok";
        let tokens = 0;
        const apply = (request: SyncRequest) => {
          if (applied.has(request.seq)) return;
          applied.add(request.seq);
          for (const entry of request.entries) {
            entry.usage.forEach(([, count], j) => {
              counted.push([mono - (entry.spentAgo?.[j] ?? 0), count]);
            });
          }
        };
        const quotas = createQuotas({
          transport: {
            async sync(request, now): Promise<SyncReply> {
              if (outcome === "stale") return { ...storeReply(request, now, rule, 0), status: "stale", entries: [] };
              if (outcome === "lost") throw new StoreUnreachableError("no reply");
              // the store applied it, then the reply was lost or an error came back
              apply(request);
              if (outcome === "lostApplied") throw new StoreUnreachableError("reply lost");
              if (outcome === "error") throw new SyncRejectedError("refused");
              if (outcome === "errorApplied") throw new SyncRejectedError("failed after applying");
              return storeReply(request, now, rule, tokens);
            },
          },
          clock,
          scheduler: neverScheduler,
          rules: { api: rule },
          instancesHint: 1,
        });
        const handle = quotas.resolve("api", "k");
        for (const step of steps) {
          if (step.kind === "check") {
            for (let i = 0; i < step.n; i++) if (quotas.checkHandle(handle).allowed) admitted.push(mono);
          } else if (step.kind === "wait") {
            wall += step.ms;
            mono += step.ms;
          } else if (step.kind === "step") {
            wall += step.ms;
          } else if (step.kind === "observe") {
            quotas.observe();
          } else {
            outcome = step.outcome;
            tokens = step.tokens;
            await quotas.sync();
          }
        }
        const stamps = [...new Set(counted.map(([at]) => at))];
        for (const x of stamps) {
          const reported = counted.filter(([at]) => at <= x).reduce((sum, [, count]) => sum + count, 0);
          expect(reported).toBeLessThanOrEqual(admitted.filter((at) => at <= x).length);
        }
        // and every spend is reported at most once
        expect(counted.reduce((sum, [, count]) => sum + count, 0)).toBeLessThanOrEqual(admitted.length);
      }),
      { numRuns: 300 },
    );
  });

  it("reports spends observed between ticks with their age, and those after the last observation with none", async () => {
    let wall = 1_000_000;
    let mono = 0;
    const requests: SyncRequest[] = [];
    const quotas = createQuotas({
      transport: {
        async sync(request, now) {
          requests.push(structuredClone(request));
          return storeReply(request, now, rule, 10);
        },
      },
      clock: { now: () => wall, monotonic: () => mono },
      scheduler: neverScheduler,
      rules: { api: rule },
      instancesHint: 1,
    });
    const handle = quotas.resolve("api", "k");
    await quotas.sync(); // 10 tokens granted at wall 1,000,000
    quotas.checkHandle(handle);
    quotas.checkHandle(handle);
    wall += 10;
    mono += 10;
    quotas.observe(); // the two above were spent by mono 10
    quotas.checkHandle(handle);
    wall += 7;
    mono += 7;
    quotas.observe(); // one more by mono 17
    quotas.checkHandle(handle);
    wall += 30;
    mono += 30;
    await quotas.sync(); // sent at mono 47: the last one is dated at the tick
    const last = requests.at(-1)!.entries[0]!;
    expect(last.usage).toEqual([
      [1_000_000, 2],
      [1_000_000, 1],
      [1_000_000, 1],
    ]);
    expect(last.spentAgo).toEqual([37, 30, 0]);
  });

  it("a key that runs dry and denies asks again at an observation, no sooner than half an interval after its last request", async () => {
    let wall = 1_000_000;
    const requests: SyncRequest[] = [];
    let denyFor = 0;
    const quotas = createQuotas({
      transport: {
        async sync(request, now) {
          requests.push(structuredClone(request));
          const reply = storeReply(request, now, rule, 2);
          for (const e of reply.entries) e.denyUntil = denyFor > 0 ? now + denyFor : 0;
          return reply;
        },
      },
      clock: { now: () => wall },
      scheduler: neverScheduler,
      rules: { api: rule },
      instancesHint: 1,
    });
    const handle = quotas.resolve("api", "k");
    await quotas.sync();
    for (let i = 0; i < 3; i++) quotas.checkHandle(handle); // 2 admitted, 1 denied
    wall += 20;
    quotas.observe();
    await Promise.resolve();
    expect(requests).toHaveLength(1); // 20 ms after the last request: not yet
    wall += 5;
    quotas.observe();
    await new Promise((resolve) => setImmediate(resolve));
    expect(requests).toHaveLength(2); // 25 ms: a round, which brings 2 more tokens
    // the store says nothing is left for 40 ms: no early request until then
    denyFor = 40;
    for (let i = 0; i < 5; i++) quotas.checkHandle(handle);
    wall += 30;
    await quotas.sync();
    expect(requests).toHaveLength(3);
    for (let i = 0; i < 5; i++) quotas.checkHandle(handle);
    wall += 30;
    quotas.observe();
    await new Promise((resolve) => setImmediate(resolve));
    expect(requests).toHaveLength(3);
    // past it, but the last grant was short of what was asked (scarce capacity): the tick, not sooner
    denyFor = 0;
    wall += 20;
    await quotas.sync();
    expect(requests).toHaveLength(4);
    expect(requests[3]!.entries[0]!.want).toBeGreaterThan(2);
    for (let i = 0; i < 5; i++) quotas.checkHandle(handle);
    wall += 30;
    quotas.observe();
    await new Promise((resolve) => setImmediate(resolve));
    expect(requests).toHaveLength(4);
  });

  it("a key that runs dry while its group's last request went unanswered waits for the tick (no early retries to a store away)", async () => {
    let wall = 1_000_000;
    let calls = 0;
    let down = false;
    const quotas = createQuotas({
      transport: {
        async sync(request, now) {
          calls++;
          if (down) throw new StoreUnreachableError("away");
          return storeReply(request, now, rule, 1);
        },
      },
      clock: { now: () => wall },
      scheduler: neverScheduler,
      rules: { api: rule },
      instancesHint: 1,
    });
    const handle = quotas.resolve("api", "k");
    await quotas.sync();
    down = true;
    quotas.checkHandle(handle);
    wall += 30;
    await quotas.sync(); // unanswered: the request stays pending
    quotas.checkHandle(handle); // denied: no token
    wall += 40;
    quotas.observe();
    await new Promise((resolve) => setImmediate(resolve));
    expect(calls).toBe(2);
  });

  it("sends no ages without observations (Lambda: no timers), so the request has today's shape", async () => {
    let wall = 1_000_000;
    const requests: SyncRequest[] = [];
    const quotas = createQuotas({
      transport: {
        async sync(request, now) {
          requests.push(structuredClone(request));
          return storeReply(request, now, rule, 10);
        },
      },
      clock: { now: () => wall },
      scheduler: neverScheduler,
      rules: { api: rule },
      instancesHint: 1,
    });
    const handle = quotas.resolve("api", "k");
    await quotas.sync();
    quotas.checkHandle(handle);
    wall += 50;
    await quotas.sync();
    expect(requests.at(-1)!.entries[0]).toMatchObject({ usage: [[1_000_000, 1]] });
    expect(requests.at(-1)!.entries[0]!.spentAgo).toBeUndefined();
  });
});
