// lua/quota-sync/ on the real cluster: idempotency by (instance, seq), incremental window sums against
// a recomputing reference model, strict mode's limit over every window, shares, deny-until and config.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { quotaLibrary } from "../../../functions/adapters/lua-scripts.ts";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { RedisQuotaStore } from "../../../functions/adapters/redis-quota-store.ts";
import { parsePolicy } from "../../../functions/core/capping/policy.ts";
import { QuotaSyncService, rulesStamp } from "../../../functions/core/quotas/quota-sync-service.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import {
  fcall,
  PROTOCOL,
  type QuotaRule,
  quotaKey,
  type SyncRequest,
  slotGroupKeys,
  slotGroupPrefix,
} from "../../../sdk/src/protocol/index.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { maxInAnyWindow, QuotaModel } from "../../support/quota-model.ts";
import {
  approximateRule as approximate,
  syncCall as call,
  syncEntry as entry,
  publishedQuotaStore,
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

const storeWith = (rule: QuotaRule, name = "api") => publishedQuotaStore(cluster, rule, name);

const windowsArb = fc.uniqueArray(fc.constantFrom(1000, 2000, 5000, 10_000, 60_000), { minLength: 1, maxLength: 3 });

describe("quota-sync.lua", () => {
  it("never counts a replayed or reordered sync twice, and its window sums (usage and reservations) match a recomputing model", async () => {
    const syncArb = fc.record({
      instance: fc.integer({ min: 0, max: 2 }),
      gapMs: fc.oneof(fc.integer({ min: 0, max: 120 }), fc.integer({ min: 0, max: 7000 })),
      entries: fc.uniqueArray(
        fc.record({
          key: fc.constantFrom("a", "b", "c"),
          usage: fc.array(fc.tuple(fc.integer({ min: -7000, max: 200 }), fc.integer({ min: 0, max: 40 })), {
            maxLength: 3,
          }),
        }),
        { selector: (e) => e.key, minLength: 1, maxLength: 3 },
      ),
    });
    await fc.assert(
      fc.asyncProperty(
        windowsArb,
        fc.array(syncArb, { minLength: 1, maxLength: 25 }),
        fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 300 })), { minLength: 1, maxLength: 40 }),
        async (windows, syncs, deliveries) => {
          const rule = approximate(windows.map((windowMs) => ({ windowMs, max: 10_000 })));
          const store = await storeWith(rule);
          const model = new QuotaModel(rule);
          // each sync is created at its own time with its instance's next seq; deliveries pick syncs in
          // any order, repeating some, and run no earlier than their creation
          const seqs = [0, 0, 0];
          let created = T0;
          const made = syncs.map((sync) => {
            created += sync.gapMs;
            const request = call(
              `i${sync.instance}`,
              ++seqs[sync.instance]!,
              sync.entries.map((e) =>
                entry(e.key, { usage: e.usage.map(([offset, count]) => [created + offset, count]), offered: 1 }),
              ),
            );
            return { request, created };
          });
          let now = T0;
          for (const [pick, delay] of deliveries) {
            const { request, created } = made[pick % made.length]!;
            now = Math.max(now, created) + delay;
            const reply = await store.sync(request, now);
            const status = model.status(request);
            expect(reply.status).toBe(status);
            request.entries.forEach((e, i) => {
              model.touch(e.key, now);
              const assignment = reply.entries[i];
              if (assignment?.mode !== "approximate") throw new Error("expected an approximate assignment");
              if (status === "applied") model.settle(e.key, request.instanceId, now, e.usage, assignment.allowance);
            });
            expect(reply.entries.map((e) => e.used)).toEqual(request.entries.map((e) => model.used(e.key)));
          }
        },
      ),
      { numRuns: 25, endOnFailure: true },
    );
  });

  it("strict: used tokens never exceed the limit in any window, with lost replies, retries, refunds and spent tokens reported at the next sync, stamped with their age or not", async () => {
    await fc.assert(
      fc.asyncProperty(
        windowsArb,
        fc.integer({ min: 5, max: 60 }),
        fc.constantFrom(20, 50, 120),
        fc.array(
          fc.record({
            instance: fc.integer({ min: 0, max: 3 }),
            // mostly within a lease; sometimes most of a 1 s window, so freed capacity is used again at once
            gapMs: fc.oneof(
              fc.integer({ min: 0, max: 150 }),
              fc.integer({ min: 0, max: 150 }),
              fc.integer({ min: 600, max: 1000 }),
            ),
            want: fc.integer({ min: 0, max: 40 }),
            useShare: fc.oneof(fc.constant(1), fc.double({ min: 0, max: 1, noNaN: true })),
            lost: fc.boolean(),
            // when the tokens are used: anywhere in the lease, or all at its last millisecond (the worst case)
            late: fc.boolean(),
            report: fc.boolean(),
            spread: fc.array(fc.double({ min: 0, max: 0.999, noNaN: true }), { minLength: 1, maxLength: 8 }),
            // spends stamped (spentAgo) when observed between ticks: each at its own time, or at an
            // observation after it; absent, all are counted from the report
            stamps: fc.option(fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: 1, maxLength: 4 })),
          }),
          { minLength: 5, maxLength: 60 },
        ),
        async (windows, max, leaseMs, steps) => {
          const rule = strict(
            windows.map((windowMs, i) => ({ windowMs, max: max * (i + 1) })),
            leaseMs,
          );
          const store = await storeWith(rule);
          const model = new QuotaModel(rule);
          const uses: number[] = [];
          const instances = Array.from({ length: 4 }, () => ({
            seq: 0,
            pending: undefined as SyncRequest | undefined,
            leases: [] as Array<{ grantedAt: number; expiresAt: number; unused: number; uses: number[] }>,
          }));
          let now = T0;
          for (const step of steps) {
            now += step.gapMs;
            const instance = instances[step.instance]!;
            // a sync whose reply was lost is sent again as it was; otherwise a new one with the refunds due
            // and, per grant, the tokens used before now and not reported yet (reported spent only when
            // step.report: an instance may also leave them to the grant's lease)
            let request = instance.pending;
            if (!request) {
              const due = instance.leases.filter((lease) => lease.expiresAt <= now);
              instance.leases = instance.leases.filter((lease) => lease.expiresAt > now);
              const refunds = due.filter((l) => l.unused > 0).map((l): [number, number] => [l.grantedAt, l.unused]);
              const usage: Array<[number, number]> = [];
              const spentAgo: number[] = [];
              if (step.report) {
                for (const lease of [...due, ...instance.leases]) {
                  const spent = lease.uses.filter((at) => at < now);
                  lease.uses = lease.uses.filter((at) => at >= now);
                  if (spent.length === 0) continue;
                  if (!step.stamps) {
                    usage.push([lease.grantedAt, spent.length]);
                    continue;
                  }
                  // each use seen by an observation between it and now (a later one is a later stamp)
                  const byAgo = new Map<number, number>();
                  spent.forEach((at, u) => {
                    const seen = at + step.stamps![u % step.stamps!.length]! * (now - at);
                    const ago = Math.floor(now - seen);
                    byAgo.set(ago, (byAgo.get(ago) ?? 0) + 1);
                  });
                  for (const [ago, count] of byAgo) {
                    usage.push([lease.grantedAt, count]);
                    spentAgo.push(ago);
                  }
                }
              }
              request = call(`i${step.instance}`, ++instance.seq, [
                entry("k", {
                  usage,
                  refunds,
                  want: step.want,
                  offered: step.want,
                  ...(step.stamps ? { spentAgo } : {}),
                }),
              ]);
            }
            const reply = await store.sync(request, now);
            const status = model.status(request);
            expect(reply.status).toBe(status);
            model.touch("k", now);
            const [assignment] = reply.entries;
            if (assignment?.mode !== "strict") throw new Error("expected a strict assignment");
            if (status === "applied") {
              for (const [at, count] of request.entries[0]!.refunds) model.addUsage("k", now, [[at, -count]]);
              const { usage, spentAgo } = request.entries[0]!;
              usage.forEach(([at, count], j) => {
                model.addSpent("k", now, at, count, spentAgo?.[j] ?? 0);
              });
              model.addGrant("k", assignment.tokens);
            } else {
              expect(assignment.tokens).toBe(0);
            }
            expect(assignment.used).toEqual(model.used("k"));
            rule.limits.forEach((limit, i) => {
              expect(assignment.used[i]).toBeLessThanOrEqual(limit.max);
            });
            if (step.lost) {
              instance.pending = request; // the tokens of a lost reply are never used nor refunded
              continue;
            }
            instance.pending = undefined;
            const used = Math.floor(assignment.tokens * step.useShare);
            const leaseUses: number[] = [];
            for (let u = 0; u < used; u++)
              leaseUses.push(
                now + (step.late ? leaseMs - 1 : Math.floor(step.spread[u % step.spread.length]! * leaseMs)),
              );
            uses.push(...leaseUses);
            instance.leases.push({
              grantedAt: reply.serverTime,
              expiresAt: assignment.leaseExpiresAt,
              unused: assignment.tokens - used,
              uses: leaseUses,
            });
          }
          for (const limit of rule.limits) expect(maxInAnyWindow(uses, limit.windowMs)).toBeLessThanOrEqual(limit.max);
        },
      ),
      // a failing case is reported as found: shrinking against Redis would outlast the test timeout
      { numRuns: 40, endOnFailure: true },
    );
  });

  it("refuses a seq more than 32 below the highest applied as stale, and still applies one within reach", async () => {
    const store = await storeWith(approximate([{ windowMs: 1000, max: 100 }]));
    const use = (seq: number) => call("i", seq, [entry("k", { usage: [[T0, 1]] })]);
    await store.sync(use(40), T0);
    expect((await store.sync(use(7), T0)).status).toBe("stale");
    expect((await store.sync(use(8), T0)).status).toBe("applied");
    expect((await store.sync(use(8), T0)).status).toBe("duplicate");
    // three usages counted, beside the allowance the last sync reserved
    const last = (await store.sync(use(41), T0)).entries[0] as { used: number[]; allowance: number };
    expect(last.used).toEqual([3 + last.allowance]);
  });

  it("answers a replay of a 15- or 16-digit seq as a duplicate (its record is written as digits, not 1e+14)", async () => {
    for (const seq of [100_000_000_000_000, Number.MAX_SAFE_INTEGER - 1]) {
      const store = await storeWith(approximate([{ windowMs: 1000, max: 100 }]));
      const request = call("big-seq", seq, [entry("k", { usage: [[T0, 30]], offered: 30 })]);
      const first = await store.sync(request, T0);
      const again = await store.sync(request, T0 + 1);
      expect([first.status, again.status]).toEqual(["applied", "duplicate"]);
      expect(again.entries[0]?.used).toEqual(first.entries[0]?.used);
      expect((await store.sync(call("big-seq", seq + 1, [entry("k")]), T0 + 2)).status).toBe("applied");
    }
  });

  it("grants no tokens to a retried strict sync: the first attempt's grant already counts", async () => {
    const store = await storeWith(strict([{ windowMs: 1000, max: 10 }]));
    const first = await store.sync(call("i", 1, [entry("k", { want: 6 })]), T0);
    const retry = await store.sync(call("i", 1, [entry("k", { want: 6 })]), T0 + 5);
    expect(first.entries[0]).toMatchObject({ tokens: 6, used: [6] });
    expect(retry).toMatchObject({ status: "duplicate", entries: [{ tokens: 0, used: [6] }] });
  });

  it("strict: spent tokens with an age count from the report's now less that age (a resent request dates them later); without one, from the report", async () => {
    const spentBy = async (ago: number | undefined, reportAt: number) => {
      const store = await storeWith(strict([{ windowMs: 1000, max: 10 }], 200));
      await store.sync(call("a", 1, [entry("k", { want: 10 })]), T0);
      const report = entry("k", { usage: [[T0, 10]], ...(ago === undefined ? {} : { spentAgo: [ago] }) });
      expect((await store.sync(call("a", 2, [report]), reportAt)).entries[0]).toMatchObject({ used: [10] });
      // what the window holds at t (b asks for nothing)
      const at = async (t: number, seq: number) =>
        (await store.sync(call("b", seq, [entry("k")]), t)).entries[0]!.used[0];
      const times = [1029, 1030, 1069, 1070, 1119, 1120];
      const used: number[] = [];
      for (const [i, t] of times.entries()) used.push((await at(T0 + t, i + 1)) as number);
      return used;
    };
    // spent by T0 + 10: out of every window from the end of its 10 ms bucket + W + one bucket (the margin for
    // callers' clocks), T0 + 1030
    expect(await spentBy(90, T0 + 100)).toEqual([10, 0, 0, 0, 0, 0]);
    // the same request resent at T0 + 140: dated T0 + 50, out from T0 + 1070
    expect(await spentBy(90, T0 + 140)).toEqual([10, 10, 10, 0, 0, 0]);
    // no age (an older client): counted from the report at T0 + 100, out from T0 + 1120
    expect(await spentBy(undefined, T0 + 100)).toEqual([10, 10, 10, 10, 10, 0]);
  });

  it("strict: tokens used at the end of their lease still count when the window slides past their grant", async () => {
    const store = await storeWith(strict([{ windowMs: 1000, max: 10 }], 100));
    // a's 10 tokens may all be used at T0 + 99; a window of 1 s ending at T0 + 1000 holds that use
    expect((await store.sync(call("a", 1, [entry("k", { want: 10 })]), T0)).entries[0]).toMatchObject({ tokens: 10 });
    const next = await store.sync(call("b", 1, [entry("k", { want: 10 })]), T0 + 1000);
    expect(next.entries[0]).toMatchObject({ tokens: 0, used: [10] });
    // once a's bucket is more than W + lease behind, its tokens no longer count and b gets some
    const later = (await store.sync(call("b", 2, [entry("k", { want: 10 })]), T0 + 1150)).entries[0]!;
    expect(later.mode === "strict" && later.tokens).toBeGreaterThan(0);
    expect(later.used).toEqual([later.mode === "strict" && later.tokens]);
  });

  it("strict: denies until the next bucket once the window is fully reserved (spent tokens' buckets: W/100), and takes refunds back", async () => {
    const store = await storeWith(strict([{ windowMs: 1000, max: 10 }]));
    const full = await store.sync(call("i", 1, [entry("k", { want: 25 })]), T0 + 12);
    expect(full.entries[0]).toMatchObject({ tokens: 10, leaseExpiresAt: T0 + 62, denyUntil: T0 + 20 });
    const refunded = await store.sync(call("i", 2, [entry("k", { refunds: [[T0 + 12, 4]], want: 0 })]), T0 + 70);
    expect(refunded.entries[0]).toMatchObject({ tokens: 0, denyUntil: 0, used: [6] });
  });

  it("strict: once little is left, the next syncs hand all of it out (a part of twice what a bucket frees, not a part of the remainder)", async () => {
    const store = await storeWith(strict([{ windowMs: 1000, max: 1000 }], 200));
    // alone, a takes what it asks: 950 of 1000
    const a = await store.sync(call("a", 1, [entry("k", { want: 950, offered: 10 })]), T0);
    expect(a.entries[0]).toMatchObject({ tokens: 950 });
    // four more instances ask 30 each: each may take its part of 2 × 1000 × 50 / 1000 = 100 (here more
    // than 30), so the 50 left go out in the first two syncs; a part of the remainder each (26, 9, 4, 3)
    // left 8 of the 50 ungranted after all four: idle capacity under overload
    const granted: number[] = [];
    for (const [i, name] of ["b", "c", "d", "e"].entries()) {
      const reply = await store.sync(call(name, 1, [entry("k", { want: 30, offered: 10 })]), T0 + 5 + i);
      const e = reply.entries[0]!;
      if (e.mode !== "strict") throw new Error("expected a strict assignment");
      granted.push(e.tokens);
      expect(e.used).toEqual([950 + granted.reduce((x, y) => x + y, 0)]);
    }
    expect(granted).toEqual([30, 20, 0, 0]);
  });

  it("approximate: an exhausted key answers allowance 0 and deny-until the next bucket boundary", async () => {
    const store = await storeWith(approximate([{ windowMs: 1000, max: 10 }]));
    const reply = await store.sync(call("i", 1, [entry("k", { usage: [[T0 + 20, 12]], offered: 12 })]), T0 + 20);
    expect(reply.entries[0]).toMatchObject({ allowance: 0, denyUntil: T0 + 50, used: [12] });
  });

  it("approximate: shares follow recent demand, capped at about two intervals of the instance's own", async () => {
    const store = await storeWith(approximate([{ windowMs: 1000, max: 1000 }]));
    // alone: all that remains is its share, but it reserves only 2 × offered + 1
    expect((await store.sync(call("solo", 1, [entry("k", { offered: 40 })]), T0)).entries[0]).toMatchObject({
      allowance: 81,
    });
    expect((await store.sync(call("idle", 1, [entry("i")]), T0)).entries[0]).toMatchObject({ allowance: 1 });
    // busy is offered 9x what quiet is; every instance is also credited a small pseudo-demand, so
    // quiet's share ends up above a tenth but well below busy's
    for (let seq = 1; seq <= 20; seq++) {
      await store.sync(call("busy", seq, [entry("j", { offered: 90 })]), T0 + seq * 50);
      await store.sync(call("quiet", seq, [entry("j", { offered: 10 })]), T0 + seq * 50);
    }
    const busy = await store.sync(call("busy", 21, [entry("j", { offered: 90 })]), T0 + 1050);
    const quiet = await store.sync(call("quiet", 21, [entry("j", { offered: 10 })]), T0 + 1050);
    const [b, q] = [busy.entries[0], quiet.entries[0]] as Array<{ allowance: number }>;
    expect(b!.allowance + q!.allowance).toBeLessThanOrEqual(1000);
    expect(b!.allowance).toBeGreaterThan(5 * q!.allowance);
    expect(quiet.instances).toBe(4);
  });

  it("approximate: a sync takes twice its share of what is left, never more than is left", async () => {
    const store = await storeWith(approximate([{ windowMs: 1000, max: 1_000_000 }]));
    // alone and offered far more than the limit: all that is left, not twice it
    expect((await store.sync(call("solo", 1, [entry("solo", { offered: 5_000_000 })]), T0)).entries[0]).toMatchObject({
      allowance: 1_000_000,
    });
    // four instances with the same demand (each a share of about a quarter), none spending: each sync
    // gives its last reservation back and takes a new one out of what the others left
    const instances = ["a", "b", "c", "d"];
    for (let seq = 1; seq <= 10; seq++) {
      for (const id of instances) await store.sync(call(id, seq, [entry("k", { offered: 100_000 })]), T0 + seq * 50);
    }
    const reply = await store.sync(call("a", 11, [entry("k", { offered: 100_000 })]), T0 + 550);
    const { allowance, used } = reply.entries[0] as { allowance: number; used: number[] };
    // what was left when it asked: max less what the others hold (its own went back first)
    const left = 1_000_000 - (used[0] as number) + allowance;
    expect(allowance / left).toBeGreaterThan(0.4); // a share alone: about 0.25
    expect(allowance / left).toBeLessThan(0.6);
  });

  it("approximate: a request waiting for the reply (want) is granted from what is left when the instance's share of it rounds to 0", async () => {
    const answer = async (want: number) => {
      const store = await storeWith(approximate([{ windowMs: 1000, max: 20 }]));
      // two instances reserve 9 each (two intervals of what they were offered, and one); the quiet one's share
      // of the 2 left is below one request
      await store.sync(call("busy-1", 1, [entry("k", { offered: 4 })]), T0);
      await store.sync(call("busy-2", 1, [entry("k", { offered: 4 })]), T0 + 1);
      const reply = await store.sync(call("quiet", 1, [entry("k", { offered: 1, want })]), T0 + 2);
      return reply.entries[0] as { allowance: number; used: number[] };
    };
    const without = await answer(0);
    const waiting = await answer(1);
    expect(without).toMatchObject({ allowance: 0, used: [18] }); // 2 left, none granted
    expect(waiting).toMatchObject({ allowance: 1, used: [19] }); // granted from what was left
  });

  it("approximate: allowances handed out at different instants see each other until the next sync settles them", async () => {
    const store = await storeWith(approximate([{ windowMs: 1000, max: 100 }]));
    const a1 = (await store.sync(call("a", 1, [entry("k", { offered: 10 })]), T0)).entries[0] as { allowance: number };
    const b1 = (await store.sync(call("b", 1, [entry("k", { offered: 10 })]), T0 + 20)).entries[0] as {
      allowance: number;
      used: number[];
    };
    // b's share comes out of what a's allowance left: together never more than the limit
    expect(b1.used).toEqual([a1.allowance + b1.allowance]);
    expect(a1.allowance + b1.allowance).toBeLessThanOrEqual(100);
    // a reports 7 of its allowance used: its reservation goes back, the 7 count, a new one is reserved
    const a2 = await store.sync(call("a", 2, [entry("k", { usage: [[T0 + 40, 7]], offered: 7 })]), T0 + 60);
    const a2Entry = a2.entries[0] as { allowance: number; used: number[] };
    expect(a2Entry.used).toEqual([b1.allowance + 7 + a2Entry.allowance]);
    expect(b1.allowance + 7 + a2Entry.allowance).toBeLessThanOrEqual(100);
    // a retry of that sync answers the same allowance and reserves nothing more
    const retry = await store.sync(call("a", 2, [entry("k", { usage: [[T0 + 40, 7]], offered: 7 })]), T0 + 70);
    expect(retry).toMatchObject({
      status: "duplicate",
      entries: [{ allowance: a2Entry.allowance, used: a2Entry.used }],
    });
  });

  it("approximate: an allowance held idle and spent late counts from 100 ms before its report (never from before its grant), not from its grant", async () => {
    const store = await storeWith(approximate([{ windowMs: 1000, max: 100 }]));
    const usedAt = async (now: number) => (await store.read(call("", 0, [entry("k")]), now)).entries[0]!.used;
    const granted = (
      (await store.sync(call("a", 1, [entry("k", { offered: 10 })]), T0)).entries[0] as {
        allowance: number;
      }
    ).allowance;
    expect(granted).toBe(21);
    // a holds it 600 ms, spends it all and reports it (offered 0: its next allowance is 1)
    await store.sync(call("a", 2, [entry("k", { usage: [[T0 + 600, granted]] })]), T0 + 600);
    // the grant's bucket has left the window (T0 + 1050); the usage, counted from T0 + 500, has not: it was
    // spent at some time up to T0 + 600, so a window that ends then may hold it (counted from its grant, it
    // left 500 ms early and the store granted it again)
    expect(await usedAt(T0 + 1080)).toEqual([granted + 1]);
    expect(await usedAt(T0 + 1560)).toEqual([1]);
    // a report on time (within 100 ms of its grant) counts from the grant, as before
    const b = await storeWith(approximate([{ windowMs: 1000, max: 100 }]));
    await b.sync(call("b", 1, [entry("k", { offered: 10 })]), T0);
    await b.sync(call("b", 2, [entry("k", { usage: [[T0 + 90, 21]] })]), T0 + 90);
    expect((await b.read(call("", 0, [entry("k")]), T0 + 1060)).entries[0]!.used).toEqual([1]);
  });

  it("drops a key's fields of instances silent longer than the seq records live, keeping the recent ones", async () => {
    const namespace = uniqueNamespace();
    const store = new TestClockQuotaStore(cluster, namespace);
    await store.publish("api", approximate([{ windowMs: 1000, max: 1000 }]), "v1", 1, 1);
    const stateKey = quotaKey(slotGroupPrefix(namespace, "api", 0), "k");
    const use = (instance: string, at: number) =>
      store.sync(call(instance, 1, [entry("k", { usage: [[at, 1]], offered: 1 })]), at);
    for (let i = 0; i < 30; i++) await use(`gone-${i}`, T0);
    for (let i = 0; i < 5; i++) await use(`recent-${i}`, T0 + 100_000);
    // L, h, r and one field per instance so far
    expect(await cluster.hlen(stateKey)).toBe(3 + 35);
    // the seq records live max(W, 60 s) + 60 s: past that, the 30 first instances' fields go when a new
    // instance arrives at a key holding far more instances than sync lately
    const reply = await use("new", T0 + 120_001);
    expect(reply.status).toBe("applied");
    const fields = await cluster.hkeys(stateKey);
    expect(fields.sort()).toEqual(
      ["L", "h", "i:new", "r", ...Array.from({ length: 5 }, (_, i) => `i:recent-${i}`)].sort(),
    );
    // the key still counts: the window holds the new instance's usage (it had no reservation) and allowance
    const fresh = reply.entries[0] as { used: number[]; allowance: number };
    expect(fresh.used).toEqual([1 + fresh.allowance]);
  });

  it("a strict key stored in an earlier format (b3: one blob, 50 ms spent buckets) keeps its counts: nothing granted beyond max", async () => {
    const namespace = uniqueNamespace();
    const store = new TestClockQuotaStore(cluster, namespace);
    await store.publish("api", strict([{ windowMs: 1000, max: 10 }]), "v1", 1, 1);
    const stateKey = quotaKey(slotGroupPrefix(namespace, "api", 0), "k");
    // b3: demand, its time, the expiry mark, the cursors of the grants' ring (22 buckets of 50 ms: W + lease)
    // and the spent ring (21), the two sums, as doubles; then both rings' slots as unsigned 32-bit counts
    const c = Math.floor(T0 / 50);
    const blob = Buffer.alloc(7 * 8 + (22 + 21) * 4);
    for (const [i, value] of [0, 0, T0, c, c, 6, 3].entries()) blob.writeDoubleLE(value, i * 8);
    const slot = (ring: "g" | "s", bucket: number, count: number) =>
      blob.writeUInt32LE(count, 7 * 8 + (ring === "g" ? 0 : 22 * 4) + (bucket % (ring === "g" ? 22 : 21)) * 4);
    slot("g", c - 1, 4); // grants not reported spent: one of the two latest buckets...
    slot("g", c - 5, 2); // ...and an older one
    slot("s", c, 3); // tokens reported spent
    await cluster.hset(stateKey, { L: "b3|strict,g1000/22,s1000/21", b: blob });
    // a read converts nothing and sees the 9
    expect((await store.read(call("", 0, [entry("k")]), T0 + 10)).entries[0]!.used).toEqual([9]);
    expect(await cluster.hget(stateKey, "L")).toBe("b3|strict,g1000/22,s1000/21");
    const granted = (await store.sync(call("a", 1, [entry("k", { want: 10 })]), T0 + 10)).entries[0]!;
    expect(granted).toMatchObject({ tokens: 1, used: [10] });
    expect((await cluster.hkeys(stateKey)).sort()).toEqual(["L", "h", "i:a", "r"]);
    expect(await cluster.hget(stateKey, "L")).toBe("b4|strict,g1000/22,s1000/102");
    // the rings move on: every count is still in the window, nothing more is granted
    const later = (await store.sync(call("a", 2, [entry("k", { want: 10 })]), T0 + 310)).entries[0]!;
    expect(later).toMatchObject({ tokens: 0, used: [10] });
    // the counts are known, not when they were made: each starts again in its ring's bucket of the
    // conversion (an over-count, never an under-count). The 3 spent leave W and one bucket (for callers'
    // clocks) after their 10 ms bucket (T0 + 10), the 6 grants and the 1 granted with them W + lease after
    // their 50 ms bucket (T0)
    const used = async (t: number, seq: number) => (await store.sync(call("a", seq, [entry("k")]), t)).entries[0]!.used;
    expect([
      await used(T0 + 1029, 3),
      await used(T0 + 1030, 4),
      await used(T0 + 1099, 5),
      await used(T0 + 1100, 6),
    ]).toEqual([[10], [7], [7], [0]]);
  });

  it("refuses another protocol's arguments and a packed entry whose length disagrees with its counts, counting nothing", async () => {
    const namespace = uniqueNamespace();
    const store = new RedisQuotaStore(cluster, namespace);
    await store.publish("api", approximate([{ windowMs: 1000, max: 100 }]), "v1", 1, 1);
    const { config, sequences, instances } = slotGroupKeys(namespace, "api", 0);
    const stateKey = quotaKey(slotGroupPrefix(namespace, "api", 0), "k");
    const keys = [config, sequences, instances, stateKey];
    const sync = (args: (string | number | Buffer)[]) => fcall(cluster, quotaLibrary, "quotaSync", keys, args);
    // protocol 1: usage "at:count", refunds, offered, want as text
    await expect(sync([1, T0, "i", 1, "v1", `${T0}:5`, "", 5, 0])).rejects.toThrow(/protocol 2 expected, got 1/);
    // one usage pair announced, none sent
    const short = Buffer.alloc(32);
    for (const [i, value] of [5, 0, 1, 0].entries()) short.writeDoubleLE(value, 8 * i);
    await expect(sync([PROTOCOL, T0, "i", 1, "v1", short])).rejects.toThrow(/malformed entry 1/);
    expect(await cluster.exists(stateKey, sequences)).toBe(0);
    const read = await store.read(call("", 0, [entry("k")]), T0);
    expect(read.entries[0]!.used).toEqual([0]);
  });

  it("answers norule and counts nothing for a rule that is not configured", async () => {
    const store = new TestClockQuotaStore(cluster, uniqueNamespace());
    expect(await store.sync(call("i", 1, [entry("k", { usage: [[T0, 5]] })]), T0)).toEqual({
      status: "norule",
      serverTime: T0,
      configVersion: "",
      instances: 0,
      entries: [],
    });
  });

  it("a window whose count passes a slot's range (2^32 - 1) is carried to another layout full, its slots in range", async () => {
    const rule = approximate([{ windowMs: 1000, max: 100 }]);
    const store = await storeWith(rule);
    // usage beyond any reservation, in two buckets: each holds at most 2^32 - 1, the window twice that
    await store.sync(call("i", 1, [entry("k", { usage: [[T0, 5e9]] })]), T0);
    await store.sync(call("i", 2, [entry("k", { usage: [[T0 + 60, 5e9]] })]), T0 + 60);
    await store.publish("api", { ...rule, limits: [{ windowMs: 2000, max: 100 }] }, "v2", 1, 2);
    const converted = (await store.sync(call("i", 3, [entry("k", { offered: 5 })], "v2"), T0 + 70)).entries[0]!;
    expect(converted).toMatchObject({ used: [4_294_967_295], allowance: 0 });
    // the ring moves on: its latest bucket goes to a 32-bit slot as it is, and the window stays full
    const later = (await store.sync(call("i", 4, [entry("k", { offered: 5 })], "v2"), T0 + 400)).entries[0]!;
    expect(later).toMatchObject({ used: [4_294_967_295], allowance: 0 });
  });

  it("carries the rule when the caller's config version differs; a new max keeps usage, and so does a new window (from the longest old window's count)", async () => {
    const rule = approximate([{ windowMs: 1000, max: 100 }]);
    const store = await storeWith(rule);
    const seen = await store.sync(call("i", 1, [entry("k", { usage: [[T0, 30]] })], ""), T0);
    expect(seen).toMatchObject({ configVersion: "v1", rule });
    expect((await store.sync(call("i", 2, [entry("k")], "v1"), T0)).rule).toBeUndefined();
    const lower = { ...rule, limits: [{ windowMs: 1000, max: 40 }] };
    await store.publish("api", lower, "v2", 1, 2);
    const changed = await store.sync(call("i", 3, [entry("k", { offered: 50 })], "v1"), T0 + 10);
    // the 30 used stay; what is left of the lower max (10) is this instance's allowance, reserved
    expect(changed).toMatchObject({ configVersion: "v2", rule: lower, entries: [{ used: [40], allowance: 10 }] });
    await store.publish("api", { ...rule, limits: [{ windowMs: 2000, max: 40 }] }, "v3", 1, 3);
    // a new window: it starts from what the old one held (the 30 used and the 10 reserved); this sync settles
    // the 10 (none used), so what is left of 40 is 10
    expect((await store.sync(call("i", 4, [entry("k", { offered: 50 })], "v2"), T0 + 20)).entries[0]).toMatchObject({
      used: [40],
      allowance: 10,
    });
  });
});

describe("rule configuration in Redis (lua/quota-rule.lua through QuotaSyncService)", () => {
  const policy = (version: string, quotas: unknown[]) =>
    parsePolicy({ version, channels: ["push"], segments: [], default: { name: "rest", caps: {} }, quotas });
  const api = (max: number) => ({ name: "api", mode: "approximate", limits: [{ window: "1s", max }] });
  /** A check API container serving `quotas` from a policy as new as `stamp` (rulesStamp). */
  const container = (store: RedisQuotaStore, quotas: ReturnType<typeof policy>["quotas"], stamp: number) =>
    new QuotaSyncService({ store, rules: async () => ({ quotas, stamp }), clock: fixedClock(T0) });
  const body = (instanceId: string) => ({
    instanceId,
    rule: "api",
    group: 0,
    seq: 1,
    configVersion: "",
    entries: [entry("k")],
  });

  it("a container still on an older policy never overwrites the newer rule, nor brings back a removed one", async () => {
    const store = new RedisQuotaStore(cluster, uniqueNamespace());
    const older = policy("p.1", [api(10)]);
    const newer = policy("p.2", [api(20)]);
    // the newer container syncs first; the older one (read its policy earlier) writes on its first sync
    const fresh = await container(store, newer.quotas, 2_000).sync(body("new"));
    expect(fresh).toMatchObject({ configVersion: newer.quotas.get("api")!.version, rule: { limits: [{ max: 20 }] } });
    const stale = await container(store, older.quotas, 1_000).sync(body("old"));
    expect(stale).toMatchObject({ configVersion: newer.quotas.get("api")!.version, rule: { limits: [{ max: 20 }] } });

    // removed by a newer policy: a container that read the rule earlier cannot write it back
    const removing = container(store, newer.quotas, 3_000);
    await removing.publish({ quotas: newer.quotas, stamp: 3_000 });
    await removing.publish({ quotas: policy("p.3", []).quotas, stamp: 3_000 });
    expect(await container(store, older.quotas, 1_000).sync(body("old-2"))).toMatchObject({ status: "norule" });
    // a policy read later that has the rule again writes it
    const back = await container(store, newer.quotas, 4_000).sync(body("later"));
    expect(back).toMatchObject({ status: "applied", rule: { limits: [{ max: 20 }] } });
  });

  it("keeps the newer policy's rule when a container whose clock runs 20 ms ahead read the older policy 5 ms before the upload", async () => {
    // S3 wrote p.1 a minute before p.2 (uploaded at `upload`). B (clock right) reads p.2 5 ms after the
    // upload; A read p.1 5 ms before it, but A's clock runs 20 ms ahead, so by the read times alone A's
    // policy would look the newer one
    const store = new RedisQuotaStore(cluster, uniqueNamespace());
    const upload = Math.floor(T0 / 1000) * 1000;
    const [older, newer] = [policy("p.1", [api(10)]), policy("p.2", [api(20)])];
    const b = container(store, newer.quotas, rulesStamp(upload, upload + 5));
    const a = container(store, older.quotas, rulesStamp(upload - 60_000, upload - 5 + 20));
    expect(await b.sync(body("b"))).toMatchObject({ rule: { limits: [{ max: 20 }] } });
    expect(await a.sync(body("a"))).toMatchObject({ rule: { limits: [{ max: 20 }] } });
    expect(await b.sync({ ...body("b"), seq: 2 })).toMatchObject({ configVersion: newer.quotas.get("api")!.version });
  });

  it("an instance syncing directly in slot group 2 learns that a policy read by a fresh container cut slotGroups from 4 to 1 and max to 10", async () => {
    const namespace = uniqueNamespace();
    const store = new RedisQuotaStore(cluster, namespace);
    const before = policy("p.1", [{ ...api(1000), slotGroups: 4 }]);
    await container(store, before.quotas, 1_000).publish({ quotas: before.quotas, stamp: 1_000 });
    const direct = { ...body("sdk"), group: 2, configVersion: before.quotas.get("api")!.version };
    expect(await store.sync(direct, T0)).toMatchObject({
      status: "applied",
      configVersion: before.quotas.get("api")!.version,
    });
    // another container, which never wrote the 4-group rule, publishes the 1-group one
    const after = policy("p.2", [api(10)]);
    await container(store, after.quotas, 2_000).publish({ quotas: after.quotas, stamp: 2_000 });
    expect(await store.sync({ ...direct, seq: 2 }, T0 + 10)).toMatchObject({
      configVersion: after.quotas.get("api")!.version,
      rule: { slotGroups: 1, limits: [{ max: 10 }] },
    });
  });

  it("writes the rule again when its slot group lost it (a failover before the write replicated)", async () => {
    const namespace = uniqueNamespace();
    const store = new RedisQuotaStore(cluster, namespace);
    const service = container(store, policy("p.1", [api(10)]).quotas, 1_000);
    expect(await service.sync(body("a"))).toMatchObject({ status: "applied" });
    await cluster.del(slotGroupKeys(namespace, "api", 0).config);
    expect(await service.sync({ ...body("a"), seq: 2 })).toMatchObject({
      status: "applied",
      rule: { limits: [{ max: 10 }] },
    });
  });
});
