// Strict's W/100 spent buckets and keys carried over from another layout (lua/quota-sync/): hostile but
// valid rule changes, windows and clocks. "Defect:" marks the fixed defect a test guards against (the test
// states the contract); the rest, hostile cases that held. Keys of the previous releases' scripts, and a
// rollback to v0.2.0's, are in test/compat/quota-sync-earlier-layouts.test.ts.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import type { RedisQuotaStore } from "../../../functions/adapters/redis-quota-store.ts";
import { type QuotaRule, quotaKey, type SyncEntry, slotGroupPrefix } from "../../../sdk/src/protocol/index.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { maxInAnyWindow } from "../../support/quota-model.ts";
import {
  approximateRule as approximate,
  syncCall as call,
  syncEntry as entry,
  strictRule as strict,
} from "../../support/quota-sync-calls.ts";
import { TestClockQuotaStore } from "../../support/quota-test-clock.ts";
import { T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

/** A store with the rule published as v1, and a way to publish the next versions. */
async function storeWith(rule: QuotaRule) {
  const namespace = uniqueNamespace();
  const store = new TestClockQuotaStore(cluster, namespace);
  await store.publish("api", rule, "v1", rule.slotGroups, 1);
  let version = 1;
  const change = async (next: QuotaRule) => {
    version += 1;
    await store.publish("api", next, `v${version}`, next.slotGroups, version);
  };
  const stateKey = (key: string) => quotaKey(slotGroupPrefix(namespace, "api", 0), key);
  return { store, change, stateKey };
}

type Tokens = { tokens: number; used: number[]; denyUntil: number };
const tokensOf = (reply: Awaited<ReturnType<RedisQuotaStore["sync"]>>, i = 0): Tokens => {
  const e = reply.entries[i]!;
  if (e.mode !== "strict") throw new Error("expected a strict assignment");
  return { tokens: e.tokens, used: e.used, denyUntil: e.denyUntil };
};

describe("review 11: strict's W/100 spent buckets and keys under another layout", () => {
  it("strict: reordering a rule's two limits keeps what the windows hold (never below what was spent, never over max)", async () => {
    const { store, change, stateKey } = await storeWith(
      strict([
        { windowMs: 1000, max: 10 },
        { windowMs: 2000, max: 10 },
      ]),
    );
    expect(tokensOf(await store.sync(call("a", 1, [entry("k", { want: 10 })]), T0))).toMatchObject({ tokens: 10 });
    // all 10 spent, reported at T0 + 5; a sync at T0 + 100 moves the rings on (their buckets go to 'r')
    await store.sync(call("a", 2, [entry("k", { usage: [[T0, 10]] })]), T0 + 5);
    expect(tokensOf(await store.sync(call("a", 3, [entry("k")]), T0 + 100)).used).toEqual([10, 10]);
    // the old rings are as long as the new ones ('r': 246 slots either way): their slots must not be read as
    // the new rings' (the s1000 ring's at the place of the s2000 one)
    expect((await cluster.hgetBuffer(stateKey("k"), "r"))?.length).toBe(246 * 4);
    // the operator lists the same limits the other way round: a new layout of the same size
    await change(
      strict([
        { windowMs: 2000, max: 10 },
        { windowMs: 1000, max: 10 },
      ]),
    );
    const trace: number[][] = [];
    let seq = 4;
    for (let t = T0 + 200; t <= T0 + 4000; t += 100) {
      trace.push(tokensOf(await store.sync(call("a", seq++, [entry("k")]), t)).used);
    }
    // every window of 2 s counts at least what it truly holds: never below 0
    expect(trace.flat().every((used) => used >= 0)).toBe(true);
    // and, 4 s later, a fleet asking for 30 is given no more than max
    const late = tokensOf(await store.sync(call("b", 1, [entry("k", { want: 30 })]), T0 + 4100));
    expect(late.tokens).toBeLessThanOrEqual(10);
  });

  // Defect: a spend reported without an age, or with one of 10 ms or less, was dated at the
  // report's now (the reporting caller's clock, which may be up to 10 ms behind another's) without the stamps'
  // 10 ms margin: with 10 ms buckets it landed a bucket before its use's and left every window up to 10 ms
  // early. Fixed: every spent token counts over W plus one bucket (at least 10 ms), stamped or not.
  for (const spentAgo of [undefined, 1]) {
    it(`strict: a spend reported at once (spentAgo ${spentAgo}) through a caller 8 ms behind still holds every window of W that contains its use (clocks within 10 ms)`, async () => {
      const { store } = await storeWith(strict([{ windowMs: 1000, max: 10 }]));
      // caller B (right clock) grants x 10 tokens at T0 + 20
      expect(tokensOf(await store.sync(call("x", 1, [entry("k", { want: 10 })]), T0 + 20)).tokens).toBe(10);
      // x spends all 10 at T0 + 21 and reports them 1 ms later through caller A, whose clock is 8 ms behind:
      // A's now is T0 + 14, and the 10 are filed in [T0 + 10, T0 + 20), before their use
      const usage: [number, number][] = [[T0 + 20, 10]];
      const report = entry("k", spentAgo === undefined ? { usage } : { usage, spentAgo: [spentAgo] });
      await store.sync(call("x", 2, [report]), T0 + 22 - 8);
      // at T0 + 1020 (B's clock) the window (T0 + 20, T0 + 1020] still holds the 10 spent at T0 + 21; the
      // store answers used [0] and grants y 5 (then 10 more): 15 or 20 in a window of max 10
      const late = tokensOf(await store.sync(call("y", 1, [entry("k", { want: 10 })]), T0 + 1020));
      expect(late).toMatchObject({ tokens: 0, used: [10] });
    });
  }

  it("strict: the same spend stamped with an age over 10 ms (its margin) holds every window containing its use", async () => {
    const { store } = await storeWith(strict([{ windowMs: 1000, max: 10 }]));
    expect(tokensOf(await store.sync(call("x", 1, [entry("k", { want: 10 })]), T0 + 20)).tokens).toBe(10);
    // spent at T0 + 21, observed then; reported at T0 + 40 (19 ms later) through A, 8 ms behind: now T0 + 32
    await store.sync(call("x", 2, [entry("k", { usage: [[T0 + 20, 10]], spentAgo: [19] })]), T0 + 40 - 8);
    for (const [i, t] of [1020, 1021, 1029].entries()) {
      const reply = tokensOf(await store.sync(call("y", i + 1, [entry("k", { want: 10 })]), T0 + t));
      expect(reply).toMatchObject({ tokens: 0, used: [10] });
    }
  });

  // Defect (the wire accepts any integer window; policies only whole seconds): a window over 5 s
  // that is not a multiple of 100 ms has fractional buckets, and the key's expiry (span x bucket + 2 s) or the
  // records' (max(longest, 60 s) + 60 s) was fractional: PEXPIRE refused it after the call wrote its seq and
  // its grant, so the caller got an error and its retry was a duplicate. Fixed: both are rounded up.
  for (const windowMs of [6001, 86_400_001]) {
    it(`a rule with a window of ${windowMs} ms syncs without an error (fractional buckets)`, async () => {
      const { store } = await storeWith(strict([{ windowMs, max: 10 }]));
      const reply = tokensOf(await store.sync(call("x", 1, [entry("k", { want: 10 })]), T0 + 20));
      expect(reply).toMatchObject({ tokens: 10, used: [10] });
    });
  }

  it("strict: windows not multiples of 100 ms (1001, 1500, 3333, 86_400_000 ms) keep a spent token until the end of its W/100 bucket + W + the buckets that cover 10 ms (one), and no longer", async () => {
    for (const windowMs of [1001, 1500, 3333, 86_400_000]) {
      const { store } = await storeWith(strict([{ windowMs, max: 10 }]));
      const q = windowMs / 100;
      expect(tokensOf(await store.sync(call("x", 1, [entry("k", { want: 10 })]), T0 + 20)).tokens).toBe(10);
      // spent and reported at T0 + 25: filed in its W/100 bucket
      const spentAt = T0 + 25;
      await store.sync(call("x", 2, [entry("k", { usage: [[T0 + 20, 10]] })]), spentAt);
      // the bucket's end + W + one bucket (the margin for callers' clocks, 10 ms or more)
      const end = (Math.floor(spentAt / q) + 1) * q + windowMs + Math.ceil(10 / q) * q;
      const before = tokensOf(await store.sync(call("y", 1, [entry("k")]), Math.ceil(end) - 1));
      const after = tokensOf(await store.sync(call("y", 2, [entry("k")]), Math.ceil(end)));
      expect([windowMs, before.used, after.used]).toEqual([windowMs, [10], [0]]);
    }
  });

  it("strict: rule changes mid-traffic (lease 20/50/200, a second limit added, removed or listed first) never let a window of 1 s hold more than its 10 spent tokens, with grants of the old layouts spent, stamped and refunded", async () => {
    const rules = [
      strict([{ windowMs: 1000, max: 10 }], 50),
      strict([{ windowMs: 1000, max: 10 }], 200),
      strict([{ windowMs: 1000, max: 10 }], 20),
      strict(
        [
          { windowMs: 1000, max: 10 },
          { windowMs: 2000, max: 15 },
        ],
        50,
      ),
      strict(
        [
          { windowMs: 2000, max: 15 },
          { windowMs: 1000, max: 10 },
        ],
        200,
      ),
      strict(
        [
          { windowMs: 1000, max: 10 },
          { windowMs: 60_000, max: 40 },
        ],
        50,
      ),
    ];
    const stepArb = fc.record({
      instance: fc.integer({ min: 0, max: 2 }),
      gapMs: fc.oneof(
        fc.integer({ min: 0, max: 60 }),
        fc.integer({ min: 0, max: 250 }),
        fc.integer({ min: 700, max: 1100 }),
      ),
      change: fc.option(fc.integer({ min: 0, max: rules.length - 1 }), { freq: 4 }),
      want: fc.integer({ min: 0, max: 12 }),
      spend: fc.integer({ min: 0, max: 12 }),
      // how long before the report the tokens were used (over 10 ms: stamped with it)
      ago: fc.oneof(fc.constant(0), fc.integer({ min: 11, max: 120 })),
      lost: fc.boolean(),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: rules.length - 1 }),
        fc.array(stepArb, { minLength: 5, maxLength: 40 }),
        async (first, steps) => {
          const { store, change } = await storeWith(rules[first]!);
          let version = 1;
          const held: { grantedAt: number; left: number; leaseEnd: number }[][] = [[], [], []];
          const seqs = [0, 0, 0];
          const uses: number[] = [];
          let now = T0 + 3;
          for (const step of steps) {
            now += step.gapMs;
            if (step.change !== null) {
              await change(rules[step.change]!);
              version += 1;
            }
            const mine = held[step.instance]!;
            // tokens used `ago` before the report, from grants whose lease had not ended by then
            const usage: [number, number][] = [];
            let toSpend = step.spend;
            const usedAt = now - step.ago;
            for (const grant of mine) {
              if (toSpend === 0) break;
              if (grant.left === 0 || usedAt < grant.grantedAt || usedAt >= grant.leaseEnd) continue;
              const n = Math.min(grant.left, toSpend);
              grant.left -= n;
              toSpend -= n;
              usage.push([grant.grantedAt, n]);
              for (let u = 0; u < n; u++) uses.push(usedAt);
            }
            const refunds: [number, number][] = mine
              .filter((grant) => grant.left > 0 && grant.leaseEnd <= now)
              .map((grant) => [grant.grantedAt, grant.left]);
            held[step.instance] = mine.filter((grant) => grant.left > 0 && grant.leaseEnd > now);
            const fields: Partial<SyncEntry> = { usage, refunds, want: step.want, offered: step.want };
            if (step.ago > 10 && usage.length > 0) fields.spentAgo = usage.map(() => step.ago);
            seqs[step.instance]! += 1;
            const reply = await store.sync(
              call(`i${step.instance}`, seqs[step.instance]!, [entry("k", fields)], `v${version}`),
              now,
            );
            const e = reply.entries[0]!;
            if (e.mode !== "strict") throw new Error("expected strict");
            expect(e.used.every((used) => used >= 0)).toBe(true);
            if (!step.lost && e.tokens > 0) {
              held[step.instance]!.push({ grantedAt: reply.serverTime, left: e.tokens, leaseEnd: e.leaseExpiresAt });
            }
          }
          expect(maxInAnyWindow(uses, 1000)).toBeLessThanOrEqual(10);
        },
      ),
      { numRuns: 60, endOnFailure: true },
    );
  });

  it("strict -> approximate -> strict within one window: what strict held comes back as spent, nothing beyond max", async () => {
    const { store, change } = await storeWith(strict([{ windowMs: 1000, max: 10 }], 200));
    // x holds 6 granted (unspent), 4 spent
    expect(tokensOf(await store.sync(call("x", 1, [entry("k", { want: 10 })]), T0 + 20)).tokens).toBe(10);
    await store.sync(call("x", 2, [entry("k", { usage: [[T0 + 20, 4]] })]), T0 + 30);
    await change(approximate([{ windowMs: 1000, max: 10 }]));
    const approx = (await store.sync(call("y", 1, [entry("k", { offered: 10 })], "v2"), T0 + 60)).entries[0]!;
    expect(approx).toMatchObject({ mode: "approximate", used: [10], allowance: 0 });
    await change(strict([{ windowMs: 1000, max: 10 }], 200));
    // x spends its 6 of the first strict layout, then y asks
    await store.sync(call("x", 3, [entry("k", { usage: [[T0 + 20, 6]] })], "v3"), T0 + 100);
    for (const [i, t] of [110, 500, 1020, 1035].entries()) {
      const reply = tokensOf(await store.sync(call("y", i + 2, [entry("k", { want: 10 })], "v3"), T0 + t));
      expect([t, reply.tokens]).toEqual([t, 0]);
    }
  });

  it("malformed stored state under another layout: 'h' of a wrong length, 'L' of another format, a b4 layout of 0 parts, a b3 blob cut short: no error, the key starts again", async () => {
    const { store, stateKey } = await storeWith(strict([{ windowMs: 1000, max: 10 }]));
    const cases: Record<string, string | Buffer>[] = [
      { L: "b4|strict,g1000/25,s1000/101", h: Buffer.alloc(13, 7) },
      { L: "b4|strict,g1000/25,s1000/101", h: Buffer.alloc(8) },
      { L: "b9|strict,g1000/22,s1000/101", h: Buffer.alloc(64) },
      { L: "b4|strict", h: Buffer.alloc(24) },
      { L: "b3|strict,g1000/25,s1000/21", b: Buffer.alloc(20) },
      { L: "nonsense" },
    ];
    for (const [i, fields] of cases.entries()) {
      const key = `m${i}`;
      await cluster.hset(stateKey(key), fields);
      const reply = tokensOf(await store.sync(call("x", i + 1, [entry(key, { want: 4 })]), T0 + 20));
      expect([i, reply]).toMatchObject([i, { tokens: 4, used: [4] }]);
      expect(await cluster.hget(stateKey(key), "L")).toBe("b4|strict,g1000/22,s1000/102");
    }
  });

  it("one call converting 20 keys of a strict rule of 4 limits (each from a lease change) keeps every key's counts", async () => {
    const limits = [
      { windowMs: 1000, max: 10 },
      { windowMs: 2000, max: 15 },
      { windowMs: 60_000, max: 100 },
      { windowMs: 86_400_000, max: 1000 },
    ];
    const { store, change } = await storeWith(strict(limits, 50));
    const keys = Array.from({ length: 20 }, (_, i) => `k${i}`);
    await store.sync(
      call(
        "x",
        1,
        keys.map((key) => entry(key, { want: 10 })),
      ),
      T0 + 20,
    );
    await store.sync(
      call(
        "x",
        2,
        keys.map((key) => entry(key, { usage: [[T0 + 20, 3]] })),
      ),
      T0 + 30,
    );
    await change(strict(limits, 200));
    const started = performance.now();
    const converted = await store.sync(
      call(
        "y",
        1,
        keys.map((key) => entry(key, { want: 10 })),
        "v2",
      ),
      T0 + 40,
    );
    const elapsed = performance.now() - started;
    for (const e of converted.entries) expect(e).toMatchObject({ tokens: 0, used: [10, 10, 10, 10] });
    // a loose bound: the call is one script run on one node (a cluster under other tests' load)
    expect(elapsed).toBeLessThan(500);
  });

  // Defect: a key converted from another layout had each ring's counts seeded in the converting
  // caller's bucket, not in max(its bucket, the stored ring's cursor): a caller whose clock is behind moved
  // every count of the window back to its own bucket. Fixed: the seeds go where the old rings stood, or now.
  it("strict: a lease change converted by a caller 8 ms behind keeps every spend in the windows that contain its use (clocks within 10 ms)", async () => {
    const { store, change, stateKey } = await storeWith(strict([{ windowMs: 1000, max: 10 }], 50));
    // B (right clock) grants x 10 at T0 + 20; x spends them at T0 + 21 and reports at T0 + 22 through B:
    // filed in [T0 + 20, T0 + 30), they hold every window until T0 + 1040 (W and one bucket for clocks)
    expect(tokensOf(await store.sync(call("x", 1, [entry("k", { want: 10 })]), T0 + 20)).tokens).toBe(10);
    await store.sync(call("x", 2, [entry("k", { usage: [[T0 + 20, 10]] })]), T0 + 22);
    // the operator raises the lease; the first sync under it reaches A, 8 ms behind: now T0 + 15
    await change(strict([{ windowMs: 1000, max: 10 }], 200));
    await store.sync(call("z", 1, [entry("k")], "v2"), T0 + 23 - 8);
    expect(await cluster.hget(stateKey("k"), "L")).toBe("b4|strict,g1000/25,s1000/102");
    // at T0 + 1020 (B) the window (T0 + 20, T0 + 1020] holds the use at T0 + 21
    const late = tokensOf(await store.sync(call("y", 1, [entry("k", { want: 10 })], "v2"), T0 + 1020));
    expect(late).toMatchObject({ tokens: 0, used: [10] });
  });

  // The same with a clock gone back 300 ms (outside the 10 ms the contract assumes, but the same-layout path
  // writes to the ring's bucket whatever the caller's clock says): the conversion takes every count 300 ms early.
  it("strict: a lease change converted by a caller whose clock went back 300 ms keeps the spend in its windows", async () => {
    const { store, change } = await storeWith(strict([{ windowMs: 1000, max: 10 }], 50));
    expect(tokensOf(await store.sync(call("x", 1, [entry("k", { want: 10 })]), T0 + 320)).tokens).toBe(10);
    await store.sync(call("x", 2, [entry("k", { usage: [[T0 + 320, 10]] })]), T0 + 322);
    await change(strict([{ windowMs: 1000, max: 10 }], 200));
    await store.sync(call("z", 1, [entry("k")], "v2"), T0 + 23);
    const late = tokensOf(await store.sync(call("y", 1, [entry("k", { want: 10 })], "v2"), T0 + 1100));
    expect(late).toMatchObject({ tokens: 0, used: [10] });
  });

  it("strict: the same lease change converted by a caller with the right clock keeps the spend until T0 + 1040 (W and one bucket for clocks)", async () => {
    const { store, change } = await storeWith(strict([{ windowMs: 1000, max: 10 }], 50));
    expect(tokensOf(await store.sync(call("x", 1, [entry("k", { want: 10 })]), T0 + 20)).tokens).toBe(10);
    await store.sync(call("x", 2, [entry("k", { usage: [[T0 + 20, 10]] })]), T0 + 22);
    await change(strict([{ windowMs: 1000, max: 10 }], 200));
    await store.sync(call("z", 1, [entry("k")], "v2"), T0 + 23);
    for (const [i, t] of [1020, 1039].entries()) {
      const reply = tokensOf(await store.sync(call("y", i + 1, [entry("k", { want: 10 })], "v2"), T0 + t));
      expect([t, reply]).toMatchObject([t, { tokens: 0, used: [10] }]);
    }
    const freed = tokensOf(await store.sync(call("y", 3, [entry("k", { want: 10 })], "v2"), T0 + 1040));
    expect(freed.tokens).toBeGreaterThan(0);
    expect(freed.used).toEqual([freed.tokens]);
  });

  it("strict: callers whose clocks differ by up to 10 ms, spends stamped with their age (over 10 ms), windows of 1, 1.001, 1.5 and 3.333 s: no window holds more than max", async () => {
    const stepArb = fc.record({
      instance: fc.integer({ min: 0, max: 2 }),
      // the caller (server) the sync goes through: its clock's offset from the real time
      offset: fc.integer({ min: -5, max: 5 }),
      gapMs: fc.oneof(
        fc.integer({ min: 0, max: 30 }),
        fc.integer({ min: 0, max: 120 }),
        fc.integer({ min: 800, max: 1100 }),
      ),
      want: fc.integer({ min: 0, max: 12 }),
      spend: fc.integer({ min: 0, max: 12 }),
      // the use: this long before the report (the report at least 11 ms after it: stamped)
      ago: fc.integer({ min: 11, max: 60 }),
      lost: fc.boolean(),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(1000, 1001, 1500, 3333),
        fc.constantFrom(20, 50, 200),
        fc.array(stepArb, { minLength: 5, maxLength: 40 }),
        async (windowMs, leaseMs, steps) => {
          const { store } = await storeWith(strict([{ windowMs, max: 10 }], leaseMs));
          // grants in real time: granted at, tokens left, the real time the lease ends (the store's end less
          // the granting caller's offset, less the most another clock may be behind)
          const held: { grantedAt: number; realAt: number; left: number; realEnd: number }[][] = [[], [], []];
          const seqs = [0, 0, 0];
          const uses: number[] = [];
          let real = T0 + 7;
          for (const step of steps) {
            real += step.gapMs;
            const now = real + step.offset;
            const usedAt = real - step.ago;
            const mine = held[step.instance]!;
            const usage: [number, number][] = [];
            let toSpend = step.spend;
            for (const grant of mine) {
              if (toSpend === 0) break;
              if (grant.left === 0 || usedAt <= grant.realAt || usedAt >= grant.realEnd) continue;
              const n = Math.min(grant.left, toSpend);
              grant.left -= n;
              toSpend -= n;
              usage.push([grant.grantedAt, n]);
              for (let u = 0; u < n; u++) uses.push(usedAt);
            }
            const refunds: [number, number][] = mine
              .filter((grant) => grant.left > 0 && grant.realEnd <= real)
              .map((grant) => [grant.grantedAt, grant.left]);
            held[step.instance] = mine.filter((grant) => grant.left > 0 && grant.realEnd > real);
            const fields: Partial<SyncEntry> = { usage, refunds, want: step.want, offered: step.want };
            if (usage.length > 0) fields.spentAgo = usage.map(() => step.ago);
            seqs[step.instance]! += 1;
            const reply = await store.sync(call(`i${step.instance}`, seqs[step.instance]!, [entry("k", fields)]), now);
            const e = reply.entries[0]!;
            if (e.mode !== "strict") throw new Error("expected strict");
            if (!step.lost && e.tokens > 0) {
              held[step.instance]!.push({
                grantedAt: reply.serverTime,
                realAt: real,
                left: e.tokens,
                realEnd: e.leaseExpiresAt - step.offset - 10,
              });
            }
          }
          expect(maxInAnyWindow(uses, windowMs)).toBeLessThanOrEqual(10);
        },
      ),
      { numRuns: 80, endOnFailure: true },
    );
  });

  // Found while probing windows the wire accepts (not this change's: approximate's buckets are as before): an
  // approximate window over W/50 buckets that is not whole (1001 ms: a span of 21.02) let no count go while
  // its ring moved on by less than its size (`b - span` is not a bucket: the wrong slot was taken off), so a
  // key synced often stayed full. Fixed: the span is rounded up.
  it("approximate: a window of 1001 ms lets usage go once it is older than the window", async () => {
    // the same syncs under 1000 ms and 1001 ms: the 7 used at T0 + 10 leave both windows by T0 + 1100; what
    // stays is the reservation of 1 made at each sync (nothing offered, as much left as instances)
    const usedAfter = async (windowMs: number) => {
      const { store } = await storeWith(approximate([{ windowMs, max: 100 }]));
      await store.sync(call("a", 1, [entry("k", { usage: [[T0 + 10, 7]] })]), T0 + 10);
      let seq = 1;
      let used: number[] = [];
      for (let t = T0 + 210; t <= T0 + 3010; t += 200)
        used = (await store.sync(call("a", ++seq, [entry("k")]), t)).entries[0]!.used;
      return used;
    };
    expect(await usedAfter(1000)).toEqual([1]);
    expect(await usedAfter(1001)).toEqual([1]);
  });

  it("strict: the spent ring moved on by 1 to 102 buckets in one sync keeps exactly the spends of its last 102 buckets (W and one for clocks)", async () => {
    for (const moved of [1, 2, 3, 50, 99, 100, 101, 102]) {
      const { store } = await storeWith(strict([{ windowMs: 1000, max: 1000 }], 50));
      // a spend of 1 in each of 101 buckets of 10 ms (T0 + 5, + 15, ...), each reported when made
      let seq = 0;
      const spentAt: number[] = [];
      for (let i = 0; i < 101; i++) {
        const t = T0 + 5 + 10 * i;
        const granted = tokensOf(await store.sync(call("x", ++seq, [entry("k", { want: 1 })]), t));
        expect(granted.tokens).toBe(1);
        await store.sync(call("x", ++seq, [entry("k", { usage: [[t, 1]] })]), t);
        spentAt.push(t);
      }
      const last = T0 + 5 + 10 * 100;
      const at = last + 10 * moved;
      const current = Math.floor(at / 10);
      const expected = spentAt.filter((t) => Math.floor(t / 10) > current - 102).length;
      const reply = tokensOf(await store.sync(call("y", 1, [entry("k")]), at));
      expect([moved, reply.used]).toEqual([moved, [expected]]);
    }
  });

  // Defect: a converted key kept its stored expiry mark, so the conversion did not push its
  // expiry to the new layout's (KEY_TTL was pushed only when the mark was 1 s old). A limit of a day added to
  // a rule of 1 s: the key still expired ~3 s after the old mark, taking the day window's counts with it.
  it("strict: a day limit added to a key (converted within a second of its expiry mark) keeps the day's spends past the old layout's expiry", async () => {
    const { store, change, stateKey } = await storeWith(strict([{ windowMs: 1000, max: 10 }], 50));
    expect(tokensOf(await store.sync(call("x", 1, [entry("k", { want: 5 })]), T0)).tokens).toBe(5);
    await change(
      strict(
        [
          { windowMs: 1000, max: 10 },
          { windowMs: 86_400_000, max: 20 },
        ],
        50,
      ),
    );
    const converted = tokensOf(await store.sync(call("x", 2, [entry("k", { want: 5 })], "v2"), T0 + 100));
    expect(converted.tokens).toBe(5);
    await store.sync(
      call(
        "x",
        3,
        [
          entry("k", {
            usage: [
              [T0, 5],
              [T0 + 100, 5],
            ],
          }),
        ],
        "v2",
      ),
      T0 + 200,
    );
    // the key's expiry is the new layout's (a day and more), not the old one's (under 3.2 s): the day window's
    // 10 spent outlive the old expiry
    expect(await cluster.pttl(stateKey("k"))).toBeGreaterThan(86_400_000);
    const day = tokensOf(await store.sync(call("y", 1, [entry("k")], "v2"), T0 + 5000));
    expect(day.used[1]).toBeGreaterThanOrEqual(10);
  });
});
