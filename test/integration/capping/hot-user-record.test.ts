// A hot user (thousands of kept sends under the tightest valid policy) against docs/decisions/0095: a check
// rewrites the record's newest sends and directory, never every send the user keeps, and decides as the
// reference model does through the layout change (a record of the earlier format written on), spills to
// chunks, backfills landing among spilled sends, and duplicates whose send is in a chunk.

import calculateSlot from "cluster-key-slot";
import fc from "fast-check";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { type Policy, parsePolicy } from "../../../functions/core/capping/policy.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { capIdentityKey, capRecordKey, capTagOf, recordRangeOf } from "../../../sdk/src/protocol/index.ts";
import { runScript } from "../../support/cap-sends-runner.ts";
import { CappingModel, type ModelCall, modelWindows } from "../../support/capping-model.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
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

interface SeededSend {
  at: number;
  identity: string;
}

/**
 * `sends` of one user written as the earlier record format (2: a window part of 6-byte times and 1-byte
 * identity numbers, no tail) with the identity table naming the numbers, as a deployed store holds them.
 */
async function seedRecord(namespace: string, userId: number, sends: readonly SeededSend[], now: number) {
  const tag = capTagOf(userId);
  const identities = [...new Set(sends.map((send) => send.identity))];
  const numberOf = new Map(identities.map((identity, i) => [identity, i + 1]));
  const table: (string | number)[] = ["next", identities.length];
  for (const [identity, number] of numberOf)
    table.push(`i:${identity}`, number, `n:${number}`, identity, `t:${number}`, now);
  const sorted = [...sends].sort((a, b) => a.at - b.at);
  const record = Buffer.alloc(1 + 7 * sorted.length);
  record[0] = 128;
  sorted.forEach((send, i) => {
    record.writeUIntBE(send.at, 1 + 7 * i, 6);
    record[7 + 7 * i] = numberOf.get(send.identity) as number;
  });
  const identityKey = capIdentityKey(namespace, tag);
  const recordKey = capRecordKey(namespace, tag, recordRangeOf(userId));
  await cluster.hset(identityKey, ...table.map(String));
  await cluster.hset(recordKey, String(userId), record);
  await cluster.pexpire(identityKey, 3_600_000);
  await cluster.pexpire(recordKey, 3_600_000);
  return recordKey;
}

/** The primary serving `key`, by a connection of its own. */
function ownerOf(key: string): Redis {
  const node = cluster.nodes("master").find((each) => {
    const slots = cluster.slots[calculateSlot(key)] ?? [];
    return slots[0] === `${each.options.host}:${each.options.port}`;
  });
  if (!node) throw new Error(`no primary serves ${key}`);
  return node;
}

/** Calls per command (scripts' own commands included) and bytes replicated, on one primary. */
async function workOn(node: Redis): Promise<{ calls: Map<string, number>; replicated: number }> {
  const [stats, replication] = [await node.info("commandstats"), await node.info("replication")];
  const calls = new Map<string, number>();
  for (const [, name, count] of stats.matchAll(/^cmdstat_([^:]+):calls=(\d+),/gm))
    calls.set(name as string, Number(count));
  return { calls, replicated: Number(/master_repl_offset:(\d+)/.exec(replication)?.[1]) };
}

/** What one call did on `node`: each command's calls (the monitoring ones left out) and the bytes replicated. */
async function workOf(node: Redis, call: () => Promise<unknown>) {
  const before = await workOn(node);
  await call();
  const after = await workOn(node);
  const calls: Record<string, number> = {};
  for (const [name, count] of after.calls) {
    const done = count - (before.calls.get(name) ?? 0);
    if (done > 0 && !["info", "replconf", "ping", "cluster"].includes(name)) calls[name] = done;
  }
  return { calls, replicated: after.replicated - before.replicated };
}

const SECOND = 1_000;
/** The tightest policy the schema takes: 10,000 sends a second (MAX_CAP, the shortest window). */
const TIGHTEST = { a: [{ window: "1s", max: 10_000 }] };

describe("a hot user's record", () => {
  it("a hot user's check does the same work with 10 or 10,000 kept sends", async () => {
    // repro: 1s max 10000; a user with 10 and one with 10,000 anonymous sends over 5 minutes; a check rewrote the whole record
    const namespace = uniqueNamespace();
    const clock = fixedClock(T0);
    const rules = rulesOf({ version: "v", channels: ["a"], segments: [], default: { name: "rest", caps: TIGHTEST } });
    const capper = new Capper({ store, rules: () => rules, clock, namespace, hotRecords: true });
    // two users of one tag (one primary): 10 and 10,000 sends spread over the 5 minutes before T0
    const users = { few: 4_096 * 256 + 3, many: 4_096 * 256 + 5 };
    const spread = (count: number) =>
      Array.from({ length: count }, (_, i) => ({
        at: T0 - 300 * SECOND + Math.floor((i * 300 * SECOND) / count),
        identity: "a:",
      }));
    const recordKey = await seedRecord(namespace, users.few, spread(10), T0);
    await seedRecord(namespace, users.many, spread(10_000), T0);
    const node = ownerOf(recordKey);
    const work: Record<string, Awaited<ReturnType<typeof workOf>>[]> = { few: [], many: [] };
    for (let i = 0; i < 15; i++) {
      clock.advance(10);
      for (const [name, userId] of Object.entries(users)) {
        const check = () => capper.checkUser({ userId, channel: "a" });
        work[name]?.push(await workOf(node, async () => expect((await check()).decision).toBe("allowed")));
      }
    }
    // the first write of the 10,000 makes its record chunked (its bytes sliced, written once whole), the next
    // ones drain it, 1,024 sends into chunks a write; from then on its checks do the same commands as the user
    // with 10 sends, and write a record of at most 1,024 sends, a tenth of its 70 kB of sends
    for (const [i, check] of (work.many ?? []).entries()) {
      if (i < 12) continue;
      expect(check.calls).toEqual(work.few?.[i]?.calls);
      expect(check.replicated).toBeLessThan(1_024 * 8 + 1_000);
    }
    expect(work.many?.[0]?.replicated).toBeGreaterThan(70_000);
    // its sends are all kept: 10,003 after the checks, the oldest 18 × 512 in chunk fields beside the two records
    expect(await cluster.hlen(recordKey)).toBe(2 + 18);
  });

  it("a capped check of a hot user reads only the chunks its searches reach, not every chunk its window holds", async () => {
    // repro: 1s max 10000 at its max; each check read and joined the ~20 chunks of its second, twice (1.9 ms)
    const namespace = uniqueNamespace();
    const clock = fixedClock(T0);
    const rules = rulesOf({ version: "v", channels: ["a"], segments: [], default: { name: "rest", caps: TIGHTEST } });
    const capper = new Capper({ store, rules: () => rules, clock, namespace, hotRecords: true });
    const userId = 4_096 * 256 + 7;
    const spread = (count: number, from: number, to: number) =>
      Array.from({ length: count }, (_, i) => ({ at: from + Math.floor((i * (to - from)) / count), identity: "a:" }));
    const recordKey = await seedRecord(
      namespace,
      userId,
      [...spread(20_000, T0 - 60 * SECOND, T0 - SECOND), ...spread(9_880, T0 - 879, T0)],
      T0,
    );
    // 120 allowed checks fill the second (and turn the record into chunks); the next one is capped
    for (let i = 0; i < 120; i++) {
      clock.set(T0 + i);
      expect((await capper.checkUser({ userId, channel: "a" })).decision).toBe("allowed");
    }
    expect((await cluster.hgetBuffer(recordKey, String(userId)))?.[0]).toBeGreaterThanOrEqual(192);
    // the second before T0 + 120 holds 10,000 sends, about 19 chunks of 512 besides the record's newest
    expect(await cluster.hlen(recordKey)).toBeGreaterThan(40);
    clock.set(T0 + 120);
    let report: Awaited<ReturnType<Capper["checkUser"]>> | undefined;
    const work = await workOf(ownerOf(recordKey), async () => {
      report = await capper.checkUser({ userId, channel: "a" });
    });
    expect(report?.decision).toBe("capped");
    expect(report?.windows[0]?.used).toBe(10_000);
    // the oldest send of the full second (T0 - 879) leaves it at T0 + 121
    expect(report?.retryAfterMs).toBe(1);
    // beside a capped check of a user with 5 sends: the same commands, and at most 3 chunks read by HGET
    const light = { namespace: uniqueNamespace(), userId: 4_096 * 256 + 9 };
    const lightRules = rulesOf({
      version: "v",
      channels: ["a"],
      segments: [],
      default: { name: "rest", caps: { a: [{ window: "1s", max: 5 }] } },
    });
    const lightKey = await seedRecord(light.namespace, light.userId, spread(5, T0 - 500, T0), T0);
    const lightCapper = new Capper({ store, rules: () => lightRules, clock, namespace: light.namespace });
    const lightWork = await workOf(ownerOf(lightKey), async () => {
      expect((await lightCapper.checkUser({ userId: light.userId, channel: "a" })).decision).toBe("capped");
    });
    const { hget: chunkReads = 0, ...others } = work.calls;
    const { hget: lightReads = 0, ...lightOthers } = lightWork.calls;
    expect(others).toEqual(lightOthers);
    expect(chunkReads - lightReads).toBeLessThanOrEqual(3);
  });

  it("a resend whose first send lies in a chunk whose identities are not listed yet is a duplicate", async () => {
    const namespace = uniqueNamespace();
    const clock = fixedClock(T0);
    const rules = rulesOf({ version: "v", channels: ["a"], segments: [], default: { name: "rest", caps: TIGHTEST } });
    const capper = new Capper({ store, rules: () => rules, clock, namespace, hotRecords: true });
    const userId = 4_096 * 256 + 11;
    // 3,000 sends over the minute before T0, those of campaign c9 only at 1,100-1,110: the write that makes the
    // record chunked spills 4 chunks, the 3rd and 4th (sends 1,025-2,048) with their identities not listed
    const sends = Array.from({ length: 3_000 }, (_, i) => ({
      at: T0 - 60 * SECOND + i * 20,
      identity: i >= 1_100 && i <= 1_110 ? "a:c9" : "a:",
    }));
    const recordKey = await seedRecord(namespace, userId, sends, T0);
    expect((await capper.checkUser({ userId, channel: "a" })).decision).toBe("allowed");
    expect((await cluster.hgetBuffer(recordKey, String(userId)))?.[0]).toBeGreaterThanOrEqual(192);
    expect(await cluster.hlen(recordKey)).toBe(1 + 4);
    clock.advance(1);
    expect((await capper.checkUser({ userId, channel: "a", campaignId: "c9", consume: false })).decision).toBe(
      "duplicate",
    );
    // the next write lists them; the resend is still one
    expect((await capper.checkUser({ userId, channel: "a" })).decision).toBe("allowed");
    clock.advance(1);
    expect((await capper.checkUser({ userId, channel: "a", campaignId: "c9" })).decision).toBe("duplicate");
    expect((await capper.checkUser({ userId, channel: "a", campaignId: "c8" })).decision).toBe("allowed");
  });

  it("reports a hot user's windows and retry time as the model does, read across its chunks", async () => {
    const caps = { a: [{ window: "1s", max: 400 }], "*": [{ window: "2s", max: 700 }] };
    const rules = rulesOf({ version: "hot", channels: ["a"], segments: [], default: { name: "r", caps } });
    const policy = rules.policy;
    const stepArbitrary = fc.record({
      elapsed: fc.integer({ min: 0, max: 400 }),
      offset: fc.integer({ min: -2_000, max: 3_000 }),
      consume: fc.boolean(),
    });
    let chunkedRuns = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1_300, max: 2_400 }),
        fc.integer({ min: 0, max: 2 ** 31 }),
        fc.array(stepArbitrary, { minLength: 5, maxLength: 25 }),
        async (count, seed, steps) => {
          const namespace = uniqueNamespace();
          const userId = 9 * 256 + 1;
          const clock = fixedClock(T0);
          const capper = new Capper({ store, rules: () => rules, clock, namespace, hotRecords: true });
          const model = new CappingModel(policy, () => 0, 10 * 60_000);
          let state = seed;
          const next = () => {
            state = (state * 1_103_515_245 + 12_345) % 2 ** 31;
            return state;
          };
          // anonymous sends (one identity: counted in place) over the 4 s before T0 and the second after it
          const sends = Array.from({ length: count }, () => ({
            at: T0 - 4 * SECOND + (next() % (5 * SECOND)),
            identity: "a:",
          }));
          const recordKey = await seedRecord(namespace, userId, sends, T0);
          for (const send of sends) model.sendsOf(userId).push({ at: send.at, channel: "a", campaignId: "" });
          // allowed checks far ahead of every window turn the record chunked first
          for (let i = 0; i < 4; i++) {
            const at = T0 + 30 * SECOND + i;
            await capper.checkUser({ userId, channel: "a", at });
            model.apply({
              mode: "count",
              now: T0,
              at,
              channel: "a",
              campaignId: "",
              exemptCounted: false,
              users: [userId],
            });
          }
          let now = T0;
          for (const step of steps) {
            now += step.elapsed;
            clock.set(now);
            const at = now + step.offset;
            const report = await capper.checkUser({ userId, channel: "a", at, consume: step.consume });
            const [decision] = model.apply({
              mode: step.consume ? "count" : "peek",
              now,
              at,
              channel: "a",
              campaignId: "",
              exemptCounted: false,
              users: [userId],
            });
            const capped = typeof decision === "object";
            expect(report.decision).toBe(capped ? "capped" : decision);
            const policyCaps = policy.capsFor(0, "a");
            const expected = modelWindows(model.sendsOf(userId), policyCaps, at, capped);
            expect(report.windows.map((w) => [w.used, w.resetAt])).toEqual(
              expected.caps.map((c) => [c.used, c.resetAt]),
            );
            expect(report.retryAfterMs).toBe(
              expected.retryAt === undefined ? undefined : Math.max(1, expected.retryAt - at),
            );
          }
          if (((await cluster.hgetBuffer(recordKey, String(userId)))?.[0] ?? 0) >= 192) chunkedRuns += 1;
        },
      ),
      { numRuns: 12, endOnFailure: true },
    );
    expect(chunkedRuns).toBeGreaterThan(0);
  }, 120_000);

  it("stays in the earlier record format without hotRecords, which a function of the release before reads", async () => {
    // repro: v0.2.0's script reads a format-3 header (192) as format 2 of width 9; the layout waits for CAP_HOT_RECORDS=on
    const namespace = uniqueNamespace();
    const clock = fixedClock(T0);
    const rules = rulesOf({ version: "v", channels: ["a"], segments: [], default: { name: "rest", caps: TIGHTEST } });
    const capper = new Capper({ store, rules: () => rules, clock, namespace });
    const userId = 4_096 * 256 + 9;
    const sends = Array.from({ length: 2_000 }, (_, i) => ({ at: T0 - 200 * SECOND + i * 100, identity: "a:" }));
    const recordKey = await seedRecord(namespace, userId, sends, T0);
    // 9 seeded sends in the last second, then each check's own
    for (let i = 0; i < 3; i++) {
      clock.advance(10);
      expect((await capper.checkUser({ userId, channel: "a" })).windows[0]?.used).toBe(10 + i);
    }
    const header = (await cluster.hgetBuffer(recordKey, String(userId)))?.[0] as number;
    expect(header).toBeGreaterThanOrEqual(128);
    expect(header).toBeLessThan(192);
    expect(await cluster.hlen(recordKey)).toBe(1);
  });

  it("decides as the model does while its record turns chunked and spills, backfills and resends included", async () => {
    const policy: Policy = parsePolicy({
      version: "hot",
      channels: ["a", "b"],
      segments: [],
      default: { name: "rest", caps: { a: [{ window: "1s", max: 60 }], "*": [{ window: "3s", max: 240 }] } },
    });
    const identities = ["a:", "b:", "a:c1", "a:c2", "b:c3"];
    // a campaign whose sends are only among the oldest: in a chunk once the record spills
    const oldIdentity = "a:c4";
    const callArbitrary = fc.record({
      elapsed: fc.integer({ min: 0, max: 1_500 }),
      // from the backfill bound (the longest window) to a minute ahead
      offset: fc.integer({ min: -3_000, max: 60_000 }),
      channel: fc.constantFrom("a", "b"),
      campaignId: fc.constantFrom("", "", "c1", "c2", "c3", "c4"),
      mode: fc.constantFrom("count", "count", "count", "peek"),
      withWindows: fc.boolean(),
    });
    let chunkedRuns = 0;
    let spilledRuns = 0;
    await fc.assert(
      fc.asyncProperty(
        // a record of the earlier format under the threshold, just past it, or where its head spills soon
        fc.oneof(
          fc.integer({ min: 1_000, max: 1_100 }),
          fc.integer({ min: 1_530, max: 1_536 }),
          fc.integer({ min: 2_100, max: 2_600 }),
        ),
        fc.array(callArbitrary, { minLength: 10, maxLength: 40 }),
        fc.integer({ min: 0, max: 2 ** 31 }),
        fc.constantFrom(20, 860, 1_060),
        async (count, calls, seed, spanSeconds) => {
          const namespace = uniqueNamespace();
          const userId = 7 * 256 + 11;
          const model = new CappingModel(policy, () => 0, 10 * 60_000);
          // sends over the span before T0 + 1 minute: 20 s (a dense history: windows around `at` reach the
          // chunks), 860 s (all kept) or 1,060 s (some past the retention, dropped as the record turns chunked)
          const span = spanSeconds * SECOND;
          let state = seed;
          const next = () => {
            state = (state * 1_103_515_245 + 12_345) % 2 ** 31;
            return state;
          };
          const sends = Array.from({ length: count }, () => {
            const at = T0 + 60 * SECOND - span + (next() % span);
            const identity =
              at < T0 + 60 * SECOND - 0.9 * span && next() % 4 === 0 ? oldIdentity : identities[next() % 5];
            return { at, identity: identity as string };
          });
          const recordKey = await seedRecord(namespace, userId, sends, T0);
          for (const send of sends) {
            const [channel, campaignId] = send.identity.split(":") as [string, string];
            model.sendsOf(userId).push({ at: send.at, channel, campaignId });
          }
          let now = T0;
          for (const step of calls) {
            now += step.elapsed;
            const call: ModelCall = {
              mode: step.mode as "count" | "peek",
              now,
              at: now + step.offset,
              channel: step.channel,
              campaignId: step.campaignId,
              exemptCounted: false,
              users: [userId],
            };
            const scripts = { store, previous: () => Promise.reject(new Error("no earlier script in this test")) };
            const decided = await runScript(
              scripts,
              namespace,
              policy,
              () => 0,
              { ...call, withWindows: step.withWindows, hotRecords: true },
              undefined,
            );
            expect(decided).toEqual(model.apply(call));
          }
          const header = (await cluster.hgetBuffer(recordKey, String(userId)))?.[0] ?? 0;
          if (header >= 192) chunkedRuns += 1;
          // the record and its chunks: a second chunk is a spill after the layout change
          if ((await cluster.hlen(recordKey)) > 2) spilledRuns += 1;
        },
      ),
      { numRuns: 20, endOnFailure: true },
    );
    // the runs went through the layout change and past a spill (a head of more than 1,024 sends)
    expect(chunkedRuns).toBeGreaterThan(0);
    expect(spilledRuns).toBeGreaterThan(0);
  });
});
