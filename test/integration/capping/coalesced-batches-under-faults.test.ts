// Batches decided together through one Capper (the CapSendsCoalescer) on the real cluster,
// attacked with faults on single calls. The checker knows only the contract: each batch its own decisions,
// a fault fails only the batches with users in the faulted call, a retry never counts a send twice.
import fc from "fast-check";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRedisCluster, RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";

import type { CapStore } from "../../../functions/core/capping/cap-sends-script.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import type { CapBatchResult } from "../../../functions/core/capping/decisions.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { StoreUnavailableError } from "../../../functions/core/shared/errors.ts";
import { waitForCluster } from "../../../scripts/redis-cluster.ts";
import { capIdentityKey, capTagOf, USERS_PER_GROUP } from "../../../sdk/src/protocol/index.ts";
import { basePort, clusterPorts, connectCluster, primariesOf, uniqueNamespace } from "../../support/cluster.ts";
import { rulesOf, T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
let store: RedisCapStore;
beforeAll(() => {
  cluster = connectCluster();
  store = new RedisCapStore(cluster);
});
afterAll(async () => {
  await cluster.quit();
});

type Caps = Record<string, { window: string; max: number }[]>;
const MS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const windowMs = (window: string) => Number(window.slice(0, -1)) * (MS[window.slice(-1)] as number);
function applicable(caps: Caps, channel: string) {
  return [
    ...(caps[channel] ?? []).map((cap) => ({ ...cap, everyChannel: false })),
    ...(caps["*"] ?? []).map((cap) => ({ ...cap, everyChannel: true })),
  ];
}
function fullestAround(times: number[], t: number, w: number): number {
  const ends = [t, ...times.filter((s) => s > t && s < t + w)];
  return Math.max(...ends.map((x) => times.filter((s) => s > x - w && s <= x).length));
}
class Ledger {
  private readonly sends = new Map<number, { t: number; channel: string; identity: string }[]>();
  expected(caps: Caps, user: number, batch: { campaignId: string; channel: string; at: number }) {
    const mine = this.sends.get(user) ?? [];
    const identity = `${batch.campaignId}|${batch.channel}`;
    if (mine.some((s) => s.identity === identity)) return { decision: "duplicate" };
    for (const cap of applicable(caps, batch.channel)) {
      const times = mine.filter((s) => cap.everyChannel || s.channel === batch.channel).map((s) => s.t);
      if (fullestAround(times, batch.at, windowMs(cap.window)) >= cap.max) {
        return { decision: "capped", cap: `${cap.everyChannel ? "*" : batch.channel}:${cap.window}` };
      }
    }
    return { decision: "allowed" };
  }
  count(user: number, batch: { campaignId: string; channel: string; at: number }) {
    const mine = this.sends.get(user) ?? [];
    mine.push({ t: batch.at, channel: batch.channel, identity: `${batch.campaignId}|${batch.channel}` });
    this.sends.set(user, mine);
  }
}
const shape = (d: CapBatchResult["decisions"][number]) =>
  d.decision === "capped"
    ? { decision: d.decision, cap: `${d.cap?.channel}:${d.cap?.window}` }
    : { decision: d.decision };

const DENSE = Array.from({ length: 24 }, (_, i) => 512 + i);
const SPARSE = [0, 255, 256, 1023, 1024, 5_000, 262_143, 262_144, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1];
const POOL = [...DENSE, ...SPARSE];
const SEGMENT = new Set([...DENSE.filter((u) => u % 2 === 0), 0, 1024, 2 ** 32 - 1]);

const capArbitrary = fc.record({ window: fc.constantFrom("1s", "10s", "1m"), max: fc.integer({ min: 0, max: 3 }) });
const capsArbitrary: fc.Arbitrary<Caps> = fc.record(
  { a: fc.array(capArbitrary, { maxLength: 2 }), "*": fc.array(capArbitrary, { maxLength: 1 }) },
  { requiredKeys: [] },
);
const roundArbitrary = fc.record({
  // users of the round, split among its batches (disjoint: the order of concurrent batches cannot matter)
  users: fc.shuffledSubarray(POOL, { minLength: 2 }),
  cuts: fc.array(fc.nat(), { minLength: 1, maxLength: 4 }),
  params: fc.array(fc.record({ campaign: fc.constantFrom("k1", "k2"), offset: fc.constantFrom(-2_000, 0, 1_000) }), {
    minLength: 5,
    maxLength: 5,
  }),
  fault: fc.option(
    fc.record({ user: fc.constantFrom(...POOL), batch: fc.nat(4), kind: fc.constantFrom("before", "after") }),
  ),
  advance: fc.integer({ min: 0, max: 4_000 }),
});

describe("review5: batches decided together (CapSendsCoalescer)", () => {
  it("each concurrent batch gets its own decisions; a fault on one call fails exactly the batches with users in it, and their retry counts no send twice", async () => {
    await fc.assert(
      fc.asyncProperty(
        capsArbitrary,
        capsArbitrary,
        fc.array(roundArbitrary, { minLength: 1, maxLength: 6 }),
        async (segmentCaps, defaultCaps, rounds) => {
          const namespace = uniqueNamespace();
          const caps = (user: number) => (SEGMENT.has(user) ? segmentCaps : defaultCaps);
          const rules = rulesOf(
            {
              version: "v1",
              channels: ["a", "b"],
              segments: [{ name: "s", bitmap: "segments/s.roaring", caps: segmentCaps }],
              default: { name: "rest", caps: defaultCaps },
            },
            { s: [...SEGMENT] },
          );
          const tagOfKey = new Map<string, number>();
          for (const user of POOL) tagOfKey.set(capIdentityKey(namespace, capTagOf(user)), capTagOf(user));
          let fault:
            | { tag: number; at: string; identity: string; kind: string; fired: boolean; members?: string }
            | undefined;
          const faulty: CapStore = {
            async capSends(keys, args) {
              const f = fault;
              if (
                f &&
                !f.fired &&
                tagOfKey.get(keys[0] as string) === f.tag &&
                args[1] === f.at &&
                args[3] === f.identity
              ) {
                f.fired = true;
                if (f.kind === "before") throw new StoreUnavailableError("injected: not run", { mayHaveRun: false });
                await store.capSends(keys, args);
                throw new StoreUnavailableError("injected: reply lost", { mayHaveRun: true });
              }
              return store.capSends(keys, args);
            },
          };
          const clock = fixedClock(T0);
          const capper = new Capper({ store: faulty, rules: () => rules, clock, namespace });
          const ledger = new Ledger();
          for (const round of rounds) {
            clock.advance(round.advance);
            const cuts = [...new Set(round.cuts.map((c) => c % round.users.length))].sort((x, y) => x - y);
            const parts: number[][] = [];
            let from = 0;
            for (const cut of [...cuts, round.users.length]) {
              if (cut > from) parts.push(round.users.slice(from, cut));
              from = Math.max(from, cut);
            }
            const batches = parts.map((userIds, i) => {
              const p = round.params[i] as { campaign: string; offset: number };
              return {
                campaignId: p.campaign,
                channel: "a",
                userIds,
                at: clock.now() + Math.max(p.offset, -rules.policy.backfillMs),
              };
            });
            fault = undefined;
            if (round.fault) {
              const b = batches[round.fault.batch % batches.length] as (typeof batches)[number];
              const user = b.userIds[round.fault.user % b.userIds.length] as number;
              fault = {
                tag: capTagOf(user),
                at: String(b.at),
                identity: `a:${b.campaignId}`,
                kind: round.fault.kind,
                fired: false,
              };
            }
            const settled = await Promise.allSettled(batches.map((batch) => capper.capBatch(batch)));
            const inFaultedCall = (batch: (typeof batches)[number], user: number) =>
              fault?.fired === true &&
              String(batch.at) === fault.at &&
              `a:${batch.campaignId}` === fault.identity &&
              capTagOf(user) === fault.tag;
            for (const [i, batch] of batches.entries()) {
              const outcome = settled[i] as PromiseSettledResult<CapBatchResult>;
              const hit = batch.userIds.some((user) => inFaultedCall(batch, user));
              expect(
                outcome.status,
                `batch ${i} ${JSON.stringify(batch)} fault ${JSON.stringify(fault)} ${outcome.status === "rejected" ? outcome.reason : ""}`,
              ).toBe(hit ? "rejected" : "fulfilled");
              if (outcome.status === "fulfilled") {
                const expected = batch.userIds.map((user) => {
                  const e = ledger.expected(caps(user), user, batch);
                  if (e.decision === "allowed") ledger.count(user, batch);
                  return e;
                });
                expect(outcome.value.decisions.map(shape)).toEqual(expected);
              }
            }
            // the failed batches retried, one after another, without faults
            fault = undefined;
            for (const [i, batch] of batches.entries()) {
              if ((settled[i] as PromiseSettledResult<CapBatchResult>).status === "fulfilled") continue;
              const retried = await capper.capBatch(batch);
              retried.decisions.forEach((d, k) => {
                const user = batch.userIds[k] as number;
                const e = ledger.expected(caps(user), user, batch);
                if (d.decision === "duplicate" && e.decision === "allowed") {
                  // counted by the failed attempt (its call ran); counted once
                  ledger.count(user, batch);
                  return;
                }
                expect(shape(d), `retry of batch ${i}, user ${user}`).toEqual(e);
                if (e.decision === "allowed") ledger.count(user, batch);
              });
            }
          }
        },
      ),
      { numRuns: Number(process.env.REVIEW_RUNS ?? 25) },
    );
  }, 300_000);
});

const PAGE0 = Array.from({ length: 256 }, (_, i) => i);
const PAGE1 = Array.from({ length: 256 }, (_, i) => 256 + i);
const pageStep = fc.record({
  kind: fc.constantFrom("whole", "whole", "twoPages", "allBut", "part", "few", "single", "peekWhole"),
  drop: fc.array(fc.nat(255), { minLength: 1, maxLength: 20 }),
  part: fc.shuffledSubarray([...PAGE0, ...PAGE1.slice(0, 40)], { minLength: 1, maxLength: 120 }),
  campaign: fc.constantFrom("k1", "k2", "k3", ""),
  channel: fc.constantFrom("a", "b"),
  offset: fc.integer({ min: -9_000, max: 9_000 }),
  // mostly seconds; sometimes past the windows' retention (window sends move to a record's tail, blocks
  // compact) but within the 30-minute redelivery bound (every named send is still a duplicate)
  advance: fc.oneof(
    { weight: 5, arbitrary: fc.integer({ min: 0, max: 5_000 }) },
    { weight: 1, arbitrary: fc.integer({ min: 360_000, max: 900_000 }) },
  ),
});

describe("review5: uniform pages (block format 5) and their transitions", () => {
  it("whole-page campaigns, then parts, single users, another segment's users and anonymous sends on the same page decide as the ledger says", async () => {
    await fc.assert(
      fc.asyncProperty(
        capsArbitrary,
        capsArbitrary,
        fc.oneof(fc.constant([] as number[]), fc.subarray(PAGE0), fc.constant(PAGE0.filter((u) => u % 2 === 1))),
        fc.array(pageStep, { minLength: 1, maxLength: 12 }),
        // the first pages, pages across the 2^31 record range boundary, the last two pages of the ID range
        fc.constantFrom(0, 2 ** 31 - 256, 2 ** 32 - 512),
        async (segmentCaps, defaultCaps, offsets, steps, base) => {
          const members = offsets.map((u) => base + u);
          const segment = new Set(members);
          const namespace = uniqueNamespace();
          const caps = (user: number) => (segment.has(user) ? segmentCaps : defaultCaps);
          const rules = rulesOf(
            {
              version: "v1",
              channels: ["a", "b"],
              segments: [{ name: "s", bitmap: "segments/s.roaring", caps: segmentCaps }],
              default: { name: "rest", caps: defaultCaps },
            },
            { s: members },
          );
          const clock = fixedClock(T0);
          const capper = new Capper({ store, rules: () => rules, clock, namespace });
          const ledger = new Ledger();
          // an anonymous send (no campaign ID) is never a duplicate
          const expectedOf = (user: number, batch: { campaignId: string; channel: string; at: number }) =>
            batch.campaignId === ""
              ? ledger.expected(caps(user), user, { ...batch, campaignId: `anon-${Math.random()}` })
              : ledger.expected(caps(user), user, batch);
          for (const [n, step] of steps.entries()) {
            // the ledger never forgets: stay within the redelivery bound (30 minutes) of the first send
            clock.advance(Math.max(0, Math.min(step.advance, T0 + 25 * 60_000 - clock.now())));
            const at = clock.now() + Math.max(step.offset, -rules.policy.backfillMs);
            // campaign batches always carry a campaign ID; only single checks are anonymous
            const campaignId = step.kind === "single" || step.campaign !== "" ? step.campaign : "k1";
            const batch = { campaignId, channel: step.channel, at };
            const label = `step ${n} ${step.kind} ${JSON.stringify(batch)}`;
            if (step.kind === "single") {
              const user = base + (step.part[0] as number);
              const result = await capper.checkUser({
                userId: user,
                ...batch,
                ...(step.campaign === "" ? { campaignId: undefined } : {}),
              });
              const e = expectedOf(user, batch);
              expect(result.decision, `${label} user ${user}`).toBe(e.decision);
              if (e.decision === "allowed") ledger.count(user, batch);
              continue;
            }
            const dropped = new Set(step.drop);
            const userIds = (
              step.kind === "whole" || step.kind === "peekWhole"
                ? PAGE0
                : step.kind === "twoPages"
                  ? [...PAGE0, ...PAGE1]
                  : step.kind === "allBut"
                    ? PAGE0.filter((u) => !dropped.has(u))
                    : step.kind === "few"
                      ? step.part.slice(0, 5)
                      : step.part
            ).map((u) => base + u);
            const result =
              step.kind === "peekWhole"
                ? await capper.peek({ ...batch, userIds })
                : await capper.capBatch({ ...batch, userIds });
            const expected = userIds.map((user) => {
              const e = expectedOf(user, batch);
              if (e.decision === "allowed" && step.kind !== "peekWhole") ledger.count(user, batch);
              return e;
            });
            const actual = result.decisions.map(shape);
            const wrong = actual.flatMap((d, k) =>
              JSON.stringify(d) === JSON.stringify(expected[k])
                ? []
                : [{ user: userIds[k], actual: d, expected: expected[k] }],
            );
            expect(wrong.slice(0, 5), label).toEqual([]);
          }
        },
      ),
      { numRuns: Number(process.env.REVIEW_RUNS ?? 25) },
    );
  }, 300_000);
});

describe("review5: a primary paused (SIGSTOP) under batches decided together", () => {
  it("answers the batches whose users are on other primaries, fails only the paused one's, and its retry after SIGCONT counts each send once", async () => {
    const nodes = clusterPorts.map((port) => new Redis({ host: "127.0.0.1", port, lazyConnect: false }));
    const namespace = uniqueNamespace();
    try {
      const primaries = await primariesOf(nodes);
      const ownerOfTag = async (tag: number) => {
        const slot = (await (nodes[0] as Redis).call("CLUSTER", "KEYSLOT", capIdentityKey(namespace, tag))) as number;
        return primaries.findIndex((p) => p.slots.some(([from, to]) => slot >= from && slot <= to));
      };
      // two tags on different primaries
      const tagX = 0;
      let tagY = 1;
      while ((await ownerOfTag(tagY)) === (await ownerOfTag(tagX))) tagY++;
      const paused = primaries[await ownerOfTag(tagX)] as (typeof primaries)[number];
      const pid = Number(((await paused.node.info("server")).match(/process_id:(\d+)/) as RegExpMatchArray)[1]);
      const usersOf = (tag: number) => [
        tag * USERS_PER_GROUP + 3,
        tag * USERS_PER_GROUP + 700,
        2 ** 31 + tag * USERS_PER_GROUP + 5,
      ];
      const caps = { a: [{ window: "1d", max: 2 }] };
      const rules = rulesOf({
        version: "v1",
        channels: ["a"],
        segments: [],
        default: { name: "rest", caps },
      });
      const clock = fixedClock(T0);
      const faulted = createRedisCluster({
        nodes: clusterPorts.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })),
        commandTimeoutMs: 500,
      });
      const capper = new Capper({
        store: new RedisCapStore(faulted, { deadlineMs: 900 }),
        rules: () => rules,
        clock,
        namespace,
      });
      // warm the connections (slot map, script) before the pause
      await capper.capBatch({
        campaignId: "warm",
        channel: "a",
        userIds: [tagX * USERS_PER_GROUP + 1, tagY * USERS_PER_GROUP + 1],
      });
      const x = { campaignId: "k1", channel: "a", userIds: usersOf(tagX), at: T0 };
      const y = { campaignId: "k1", channel: "a", userIds: usersOf(tagY), at: T0 };
      process.kill(pid, "SIGSTOP");
      let settled: PromiseSettledResult<CapBatchResult>[];
      try {
        settled = await Promise.allSettled([capper.capBatch(x), capper.capBatch(y)]);
      } finally {
        process.kill(pid, "SIGCONT");
      }
      faulted.disconnect();
      expect(settled[1]?.status).toBe("fulfilled");
      expect((settled[1] as PromiseFulfilledResult<CapBatchResult>).value.decisions.map((d) => d.decision)).toEqual([
        "allowed",
        "allowed",
        "allowed",
      ]);
      // the paused primary's batch fails as "no answer" (or, if the pause outlasted the node timeout and a
      // replica took over, is answered there)
      const first = settled[0] as PromiseSettledResult<CapBatchResult>;
      if (first.status === "rejected") expect(first.reason).toBeInstanceOf(StoreUnavailableError);
      else expect(first.value.decisions.map((d) => d.decision)).toEqual(["allowed", "allowed", "allowed"]);
      await waitForCluster({ basePort });
      // the retry on a fresh client: counted at most once (allowed now, or duplicate if the paused call ran on SIGCONT)
      const again = new Capper({ store, rules: () => rules, clock, namespace });
      const retried = await again.capBatch(x);
      for (const d of retried.decisions) expect(["allowed", "duplicate"]).toContain(d.decision);
      // one more campaign fits a cap of 2 per day, a third does not: k1 was counted exactly once
      expect((await again.capBatch({ ...x, campaignId: "k2" })).decisions.map((d) => d.decision)).toEqual([
        "allowed",
        "allowed",
        "allowed",
      ]);
      expect((await again.capBatch({ ...y, campaignId: "k2" })).decisions.map((d) => d.decision)).toEqual([
        "allowed",
        "allowed",
        "allowed",
      ]);
      expect((await again.capBatch({ ...x, campaignId: "k3" })).decisions.map((d) => d.decision)).toEqual([
        "capped",
        "capped",
        "capped",
      ]);
    } finally {
      for (const node of nodes) node.disconnect();
    }
  }, 60_000);
});
