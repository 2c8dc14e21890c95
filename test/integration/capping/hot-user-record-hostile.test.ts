// Attacks on the hot user's record (format 3) after its searches read chunks in place and a format-2 record
// turns chunked in its first write (docs/decisions/0165): decisions and windows against the reference model.

import calculateSlot from "cluster-key-slot";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { capIdentityKey, capRecordKey, capTagOf, recordRangeOf } from "../../../sdk/src/protocol/index.ts";
import { CappingModel, modelWindows } from "../../support/capping-model.ts";
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

const SECOND = 1_000;
const REDELIVERY = 10 * 60_000;

interface Seeded {
  at: number;
  /** "<channel>:<campaign>" */
  identity: string;
}

/**
 * `sends` as a format-2 record (no tail) of the width its identity numbers need, numbers given in order of
 * first appearance in `identities` (then of the sends), as a deployed store holds them.
 */
async function seedFormat2(
  namespace: string,
  userId: number,
  sends: readonly Seeded[],
  now: number,
  extra: string[] = [],
) {
  const tag = capTagOf(userId);
  const identities = [...new Set([...extra, ...sends.map((send) => send.identity)])];
  const numberOf = new Map(identities.map((identity, i) => [identity, i + 1]));
  const width = identities.length < 256 ? 1 : 2;
  const table: (string | number)[] = ["next", identities.length];
  for (const [identity, number] of numberOf)
    table.push(`i:${identity}`, number, `n:${number}`, identity, `t:${number}`, now);
  const sorted = [...sends].sort((a, b) => a.at - b.at);
  const stride = 6 + width;
  const record = Buffer.alloc(1 + stride * sorted.length);
  record[0] = 128 + 8 * (width - 1);
  sorted.forEach((send, i) => {
    record.writeUIntBE(send.at, 1 + stride * i, 6);
    record.writeUIntBE(numberOf.get(send.identity) as number, 7 + stride * i, width);
  });
  const identityKey = capIdentityKey(namespace, tag);
  const recordKey = capRecordKey(namespace, tag, recordRangeOf(userId));
  await cluster.hset(identityKey, ...table.map(String));
  await cluster.hset(recordKey, String(userId), record);
  await cluster.pexpire(identityKey, 3_600_000);
  await cluster.pexpire(recordKey, 3_600_000);
  return recordKey;
}

interface Check {
  at: number;
  now: number;
  channel: string;
  campaignId: string;
  consume: boolean;
}

/** A fresh namespace, clock at T0, a Capper with hot records, and the model, for one run of a property. */
function hotUserRun(rules: ReturnType<typeof rulesOf>) {
  const namespace = uniqueNamespace();
  const clock = fixedClock(T0);
  const capper = new Capper({
    store,
    rules: () => rules,
    clock,
    namespace,
    hotRecords: true,
    redeliveryMs: REDELIVERY,
  });
  return { namespace, clock, capper, model: new CappingModel(rules.policy, () => 0, REDELIVERY) };
}

/** Each step checked by checkBoth() at the time its `elapsed` moves the clock to; the time after the last. */
async function checkSteps(
  capper: Capper,
  model: CappingModel,
  rules: ReturnType<typeof rulesOf>,
  userId: number,
  clock: ReturnType<typeof fixedClock>,
  steps: readonly (Omit<Check, "at" | "now"> & { elapsed: number; offset: number })[],
  from: number,
): Promise<number> {
  let now = from;
  for (const [i, step] of steps.entries()) {
    now += step.elapsed;
    clock.set(now);
    const { channel, campaignId, consume } = step;
    await checkBoth(
      capper,
      model,
      rules,
      userId,
      { now, at: now + step.offset, channel, campaignId, consume },
      `step ${i}`,
    );
  }
  return now;
}

/** A check by the Capper and by the model, their decision, windows and retry time compared. */
async function checkBoth(
  capper: Capper,
  model: CappingModel,
  rules: ReturnType<typeof rulesOf>,
  userId: number,
  check: Check,
  label: string,
) {
  const report = await capper.checkUser({
    userId,
    channel: check.channel,
    at: check.at,
    consume: check.consume,
    ...(check.campaignId ? { campaignId: check.campaignId } : {}),
  });
  const [decision] = model.apply({
    mode: check.consume ? "count" : "peek",
    now: check.now,
    at: check.at,
    channel: check.channel,
    campaignId: check.campaignId,
    exemptCounted: false,
    users: [userId],
  });
  const capped = typeof decision === "object";
  const expected = modelWindows(model.sendsOf(userId), rules.policy.capsFor(0, check.channel), check.at, capped);
  const got = {
    decision: report.decision,
    windows: report.windows.map((w) => [w.used, w.resetAt]),
    retryAfterMs: report.retryAfterMs,
  };
  const want = {
    decision: capped ? "capped" : decision,
    windows: expected.caps.map((c) => [c.used, c.resetAt]),
    retryAfterMs: expected.retryAt === undefined ? undefined : Math.max(1, expected.retryAt - check.at),
  };
  expect(got, `${label} ${JSON.stringify(check)}`).toEqual(want);
}

const checkArbitrary = fc.record({
  elapsed: fc.integer({ min: 0, max: 600 }),
  offset: fc.integer({ min: -3_000, max: 2_000 }),
  channel: fc.constantFrom("a", "b"),
  // "" anonymous, o*: campaigns only among the oldest seeded sends, n*: new ones, s*: spread over the seed
  campaignId: fc.constantFrom("", "", "o1", "o2", "s1", "s2", "n1", "n2"),
  consume: fc.constantFrom(true, true, true, false),
});

function lcg(seed: number) {
  let state = seed;
  return () => {
    state = (state * 1_103_515_245 + 12_345) % 2 ** 31;
    return state;
  };
}

describe("attacks on a hot user's record", () => {
  it("decides and reports as the model does for a format-2 user of 1,025-5,000 sends of many identities on two channels", async () => {
    const caps = {
      a: [{ window: "1s", max: 300 }],
      b: [{ window: "2s", max: 500 }],
      "*": [{ window: "3s", max: 900 }],
    };
    const rules = rulesOf({ version: "hot", channels: ["a", "b"], segments: [], default: { name: "r", caps } });
    let chunked = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1_025, max: 5_000 }),
        fc.integer({ min: 0, max: 2 ** 31 }),
        // how many filler identities (past 255: width 2)
        fc.constantFrom(1, 3, 40, 245, 300),
        fc.constantFrom(6, 20, 300),
        fc.array(checkArbitrary, { minLength: 5, maxLength: 30 }),
        async (count, seed, fillers, spanSeconds, steps) => {
          const userId = 5 * 256 + 3;
          const { namespace, clock, capper, model } = hotUserRun(rules);
          const next = lcg(seed);
          const span = spanSeconds * SECOND;
          const filler = Array.from({ length: fillers }, (_, i) => `${i % 2 ? "b" : "a"}:f${i}`);
          const sends = Array.from({ length: count }, (_, i) => {
            const at = T0 - span + (next() % span);
            const old = at < T0 - 0.8 * span;
            const pick = next() % 10;
            const identity =
              old && pick === 0
                ? `${next() % 2 ? "a" : "b"}:o${1 + (next() % 2)}`
                : pick === 1
                  ? `${next() % 2 ? "a" : "b"}:s${1 + (next() % 2)}`
                  : pick < 5
                    ? `${next() % 2 ? "a" : "b"}:`
                    : (filler[(i * 7 + next()) % filler.length] as string);
            return { at, identity };
          });
          // every seeded identity numbered: 245 fillers make 255, so the checks' new campaigns take 256 on (width 2)
          const named = ["a:", "b:", "a:o1", "b:o1", "a:o2", "b:o2", "a:s1", "b:s1", "a:s2", "b:s2"];
          const recordKey = await seedFormat2(namespace, userId, sends, T0, [...named, ...filler]);
          for (const send of sends) {
            const [channel, campaignId] = send.identity.split(":") as [string, string];
            model.sendsOf(userId).push({ at: send.at, channel, campaignId });
          }
          let now = T0;
          now = await checkSteps(capper, model, rules, userId, clock, steps, now);
          if (((await cluster.hgetBuffer(recordKey, String(userId)))?.[0] ?? 0) >= 192) chunked += 1;
        },
      ),
      { numRuns: 25, endOnFailure: true },
    );
    expect(chunked).toBeGreaterThan(0);
  }, 300_000);
});

describe("attacks on a hot user's record: policy changes", () => {
  it("a lengthened channel cap never counts another channel's sends of a hot user's chunk", async () => {
    // repro: a: 1s max 10000 (kept 15m01s); a format-2 user of 100 "b:" sends at T0-890s then 1,500 "a:"
    // sends to T0-619s; a check at T0 makes it chunked (chunk 1: the 100 b sends and 412 a sends), one at T0+1m
    // drops "b:" from the directory's identities (its newest is past the cutoff, the chunk is not); the policy
    // becomes a: 1h max 1550: the hour's channel-a cap counts the chunk's b sends as a's
    const short = rulesOf({
      version: "v1",
      channels: ["a", "b"],
      segments: [],
      default: { name: "r", caps: { a: [{ window: "1s", max: 10_000 }] } },
    });
    const long = rulesOf({
      version: "v2",
      channels: ["a", "b"],
      segments: [],
      default: { name: "r", caps: { a: [{ window: "1h", max: 1_550 }] } },
    });
    for (const hotRecords of [false, true]) {
      let rules = short;
      const namespace = uniqueNamespace();
      const userId = 6 * 256 + 1;
      const clock = fixedClock(T0);
      const capper = new Capper({ store, rules: () => rules, clock, namespace, hotRecords, redeliveryMs: REDELIVERY });
      const sends: Seeded[] = [
        ...Array.from({ length: 100 }, (_, i) => ({ at: T0 - 890 * SECOND + i, identity: "b:" })),
        ...Array.from({ length: 1_500 }, (_, i) => ({ at: T0 - 889 * SECOND + i * 180, identity: "a:" })),
      ];
      await seedFormat2(namespace, userId, sends, T0);
      expect((await capper.checkUser({ userId, channel: "a" })).decision).toBe("allowed");
      clock.set(T0 + 60 * SECOND);
      expect((await capper.checkUser({ userId, channel: "a" })).decision).toBe("allowed");
      rules = long;
      clock.set(T0 + 60 * SECOND + 1);
      const report = await capper.checkUser({ userId, channel: "a", consume: false });
      // channel a's sends: 1,500 seeded and the 2 checks'; some may be dropped already (decision 0009), no b
      // (hot: 1,602, the chunk's 100 b sends counted; format 2: 1,235)
      expect(report.windows[0]?.used, `hotRecords ${hotRecords}`).toBeLessThanOrEqual(1_502);
      expect(report.decision, `hotRecords ${hotRecords}`).toBe("allowed");
    }
  });
});

interface BatchStep {
  batch: boolean;
  elapsed: number;
  offset: number;
  channel: string;
  campaignId: string;
  consume: boolean;
}
const batchCaps = { a: [{ window: "1s", max: 300 }], "*": [{ window: "3s", max: 800 }] };
const batchRules = rulesOf({
  version: "hot",
  channels: ["a", "b"],
  segments: [],
  default: { name: "r", caps: batchCaps },
});

/**
 * A hot user of page 11 (offset 77) seeded as a format-2 record of `count` sends over 20 s, then `steps`: a
 * campaign batch (capBatch or peek) to users of its page, or a check of the user, each against the model.
 */
async function batchScenario(
  count: number,
  seed: number,
  steps: readonly BatchStep[],
  { hotRecords = true, rules = batchRules, offsets = [] as readonly number[] } = {},
) {
  const namespace = uniqueNamespace();
  const page = 11;
  const userId = page * 256 + 77;
  // the batches' users: the page's at `offsets`, or the whole page
  const everyone = (offsets.length > 0 ? offsets : Array.from({ length: 256 }, (_, i) => i)).map((o) => page * 256 + o);
  const clock = fixedClock(T0);
  const capper = new Capper({
    store,
    rules: () => rules,
    clock,
    namespace,
    hotRecords,
    redeliveryMs: REDELIVERY,
  });
  const model = new CappingModel(rules.policy, () => 0, REDELIVERY);
  const next = lcg(seed);
  const names = ["a:", "b:", "a:o1", "b:o1", "a:s1", "b:s1", "a:x", "b:x"];
  const sends = Array.from({ length: count }, () => {
    const at = T0 - 20 * SECOND + (next() % (20 * SECOND));
    const old = at < T0 - 16 * SECOND;
    const name = names[next() % names.length] as string;
    return { at, identity: !old && name.endsWith("o1") ? name.replace("o1", "x") : name };
  });
  await seedFormat2(namespace, userId, sends, T0);
  for (const send of sends) {
    const [channel, campaignId] = send.identity.split(":") as [string, string];
    model.sendsOf(userId).push({ at: send.at, channel, campaignId });
  }
  let now = T0;
  for (const [i, step] of steps.entries()) {
    now += step.elapsed;
    clock.set(now);
    const at = now + step.offset;
    if (step.batch) {
      const campaignId = step.campaignId || "n3";
      const result = step.consume
        ? await capper.capBatch({ campaignId, channel: step.channel, userIds: everyone, at })
        : await capper.peek({ campaignId, channel: step.channel, userIds: everyone, at });
      const expected = model.apply({
        mode: step.consume ? "count" : "peek",
        now,
        at,
        channel: step.channel,
        campaignId,
        exemptCounted: false,
        users: everyone,
      });
      const got = result.decisions.map((d) => d.decision);
      const want = expected.map((d) => (typeof d === "object" ? "capped" : d));
      expect(
        got.map((d, j) => [j, d]).filter(([j, d]) => d !== want[j as number]),
        `batch step ${i} ${JSON.stringify(step)}`,
      ).toEqual([]);
    } else {
      await checkBoth(
        capper,
        model,
        rules,
        userId,
        { now, at, channel: step.channel, campaignId: step.campaignId, consume: step.consume },
        `step ${i}`,
      );
    }
  }
}

describe("attacks on a hot user's record: segment changes", () => {
  it("a user joining a segment of a longer channel cap never has another channel's chunked sends counted on it", async () => {
    // the policy of the test above as one: default a: 1s max 10000, segment "long" a: 1h max 1550; the same
    // user and sends; it joins "long" (its bitmap) after the check at T0+1m. Holds: the policy's backfill bound
    // (its longest window) makes every segment keep sends over an hour, so no identity was dropped
    const document = {
      version: "v1",
      channels: ["a", "b"],
      segments: [{ name: "long", bitmap: "segments/long.roaring", caps: { a: [{ window: "1h", max: 1_550 }] } }],
      default: { name: "r", caps: { a: [{ window: "1s", max: 10_000 }] } },
    };
    const userId = 6 * 256 + 2;
    let rules = rulesOf(document, { long: [] });
    const namespace = uniqueNamespace();
    const clock = fixedClock(T0);
    const capper = new Capper({
      store,
      rules: () => rules,
      clock,
      namespace,
      hotRecords: true,
      redeliveryMs: REDELIVERY,
    });
    await seedFormat2(
      namespace,
      userId,
      [
        ...Array.from({ length: 100 }, (_, i) => ({ at: T0 - 890 * SECOND + i, identity: "b:" })),
        ...Array.from({ length: 1_500 }, (_, i) => ({ at: T0 - 889 * SECOND + i * 180, identity: "a:" })),
      ],
      T0,
    );
    expect((await capper.checkUser({ userId, channel: "a" })).decision).toBe("allowed");
    clock.set(T0 + 60 * SECOND);
    expect((await capper.checkUser({ userId, channel: "a" })).decision).toBe("allowed");
    rules = rulesOf(document, { long: [userId] });
    clock.set(T0 + 60 * SECOND + 1);
    const report = await capper.checkUser({ userId, channel: "a", consume: false });
    expect(report.segment).toBe("long");
    expect(report.windows[0]?.used).toBeLessThanOrEqual(1_502);
  });
});

describe("attacks on a hot user's record: campaign batches", () => {
  const stepsArbitrary = fc.array(
    fc.record({
      batch: fc.boolean(),
      elapsed: fc.integer({ min: 0, max: 800 }),
      offset: fc.integer({ min: -3_000, max: 1_000 }),
      channel: fc.constantFrom("a", "b"),
      campaignId: fc.constantFrom("", "o1", "s1", "n1", "n2"),
      consume: fc.constantFrom(true, true, false),
    }),
    { minLength: 4, maxLength: 16 },
  );
  it("decides batches of 15 users of a chunked hot user's page (record path) as the model does, and its checks after", async () => {
    const offsets = Array.from({ length: 15 }, (_, i) => 70 + i);
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1_025, max: 4_000 }),
        fc.integer({ min: 0, max: 2 ** 31 }),
        stepsArbitrary,
        async (count, seed, steps) => batchScenario(count, seed, steps, { offsets }),
      ),
      { numRuns: 15, endOnFailure: true },
    );
  }, 300_000);
  it("decides whole-page batches holding a chunked hot user (block path, caps under no window's events) as the model does", async () => {
    const caps = { a: [{ window: "1s", max: 5_000 }], "*": [{ window: "3s", max: 9_000 }] };
    const rules = rulesOf({ version: "wide", channels: ["a", "b"], segments: [], default: { name: "r", caps } });
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1_025, max: 4_000 }),
        fc.integer({ min: 0, max: 2 ** 31 }),
        stepsArbitrary,
        async (count, seed, steps) => batchScenario(count, seed, steps, { rules }),
      ),
      { numRuns: 10, endOnFailure: true },
    );
  }, 300_000);
});

describe("attacks on a hot user's record: a page batch after the user joined its block", () => {
  for (const hotRecords of [false, true]) {
    it(`a page batch over a block of more than 255 events decides without a script error (hotRecords ${hotRecords})`, async () => {
      // repro: a: 1s max 300, *: 3s max 800; a user of page 11 with 100 "a:" sends at T0-10s and 500 over
      // T0-400..T0 (format 2); a capBatch of the whole page at T0+2s allows it (its record joins the new
      // block: 601 events); a capBatch at `at` T0+500 (a backfill) reaches 500 events >= 300 in the 1s cap's
      // window, not every event: its count plan's pattern set (patternSet(), 1-byte event numbers) gets
      // events 101-601 and string.char fails: "bad argument #1 to 'char' (invalid value)"
      const namespace = uniqueNamespace();
      const page = 11;
      const userId = page * 256 + 77;
      const everyone = Array.from({ length: 256 }, (_, i) => page * 256 + i);
      const clock = fixedClock(T0);
      const rules = batchRules;
      const capper = new Capper({ store, rules: () => rules, clock, namespace, hotRecords, redeliveryMs: REDELIVERY });
      const sends: Seeded[] = [
        ...Array.from({ length: 100 }, (_, i) => ({ at: T0 - 10 * SECOND + i, identity: "a:" })),
        ...Array.from({ length: 500 }, (_, i) => ({ at: T0 - 400 + Math.floor(i * 0.8), identity: "a:" })),
      ];
      await seedFormat2(namespace, userId, sends, T0);
      clock.set(T0 + 2 * SECOND);
      const first = await capper.capBatch({ campaignId: "n1", channel: "a", userIds: everyone });
      expect(new Set(first.decisions.map((d) => d.decision))).toEqual(new Set(["allowed"]));
      const second = await capper.capBatch({ campaignId: "n2", channel: "a", userIds: everyone, at: T0 + 500 });
      // the user's 1s window around T0+500 holds its 500 sends: capped; the others allowed
      expect(second.decisions[77]?.decision).toBe("capped");
      expect(second.decisions.filter((d) => d.decision === "allowed")).toHaveLength(255);
    });
  }
});

describe("attacks on a hot user's record: counted in place", () => {
  it("reports a one-identity hot user's channel cap and every-channel cap as the model does, across unlisted chunks, peeks and backfills", async () => {
    const caps = { a: [{ window: "1s", max: 1_200 }], "*": [{ window: "2s", max: 2_000 }] };
    const rules = rulesOf({ version: "inplace", channels: ["a", "b"], segments: [], default: { name: "r", caps } });
    const stepArbitrary = fc.record({
      elapsed: fc.integer({ min: 0, max: 300 }),
      offset: fc.integer({ min: -2_000, max: 1_500 }),
      channel: fc.constantFrom("a", "a", "a", "a", "b"),
      campaignId: fc.constantFrom("", "", "", "", "c1"),
      consume: fc.constantFrom(true, true, false),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1_025, max: 5_000 }),
        fc.integer({ min: 0, max: 2 ** 31 }),
        fc.constantFrom(2, 4, 8),
        fc.array(stepArbitrary, { minLength: 5, maxLength: 30 }),
        async (count, seed, spanSeconds, steps) => {
          const userId = 5 * 256 + 9;
          const { namespace, clock, capper, model } = hotUserRun(rules);
          const next = lcg(seed);
          const span = spanSeconds * SECOND;
          const sends = Array.from({ length: count }, () => ({ at: T0 - span + (next() % span), identity: "a:" }));
          await seedFormat2(namespace, userId, sends, T0);
          for (const send of sends) model.sendsOf(userId).push({ at: send.at, channel: "a", campaignId: "" });
          let now = T0;
          now = await checkSteps(capper, model, rules, userId, clock, steps, now);
        },
      ),
      { numRuns: 40, endOnFailure: true },
    );
  }, 300_000);
});

/** The primary serving `key`, by a connection of its own. */
function ownerOf(key: string) {
  const node = cluster.nodes("master").find((each) => {
    const slots = cluster.slots[calculateSlot(key)] ?? [];
    return slots[0] === `${each.options.host}:${each.options.port}`;
  });
  if (!node) throw new Error(`no primary serves ${key}`);
  return node;
}

/** The chunk fields ("<user>:<seq>") that scripts read on `key`'s primary while `call` runs, by MONITOR. */
async function chunkReadsOf(key: string, call: () => Promise<unknown>): Promise<number> {
  const monitor = await ownerOf(key).monitor();
  let fields = 0;
  let marker = false;
  monitor.on("monitor", (_time: string, args: string[]) => {
    if (args[0]?.toLowerCase() === "echo" && args[1] === "attack-mark") marker = true;
    const command = args[0]?.toLowerCase();
    if ((command === "hget" || command === "hmget") && args[1] === key)
      fields += args.slice(2).filter((field) => /^\d+:\d+$/.test(field)).length;
  });
  await call();
  // a command after the call's, so that every line of the call has arrived
  await ownerOf(key).echo("attack-mark");
  while (!marker) await new Promise((resolve) => setImmediate(resolve));
  monitor.disconnect();
  return fields;
}

describe("attacks on a hot user's record: work", () => {
  it("a capped hot user's named checks list its unlisted chunks as they go, then no check reads them all", async () => {
    // repro: 1s max 10000; a format-2 user of 40,000 "a:" sends over T0-3s..T0+1s, 10 a millisecond (and one
    // of campaign c9 at T0-100s); an allowed check at T0+60s makes it chunked: 76 chunks, 74 of them unlisted. The user is capped
    // at T0 from then on, so nothing was written and no chunk got listed: every check joined the chunks its
    // windows reach (countableInPlace() refuses unlisted ones; twice when capped, onward for the retry time), and
    // one of a numbered identity (c7) also read every unlisted chunk (unlistedHas()): 39, 77 and 151 fields
    const namespace = uniqueNamespace();
    const clock = fixedClock(T0);
    const rules = rulesOf({
      version: "v",
      channels: ["a"],
      segments: [],
      default: { name: "rest", caps: { a: [{ window: "1s", max: 10_000 }] } },
    });
    const capper = new Capper({
      store,
      rules: () => rules,
      clock,
      namespace,
      hotRecords: true,
      redeliveryMs: REDELIVERY,
    });
    const userId = 4_096 * 256 + 13;
    const sends: Seeded[] = [
      { at: T0 - 100 * SECOND, identity: "a:c9" },
      ...Array.from({ length: 40_000 }, (_, i) => ({ at: T0 - 3 * SECOND + Math.floor(i / 10), identity: "a:" })),
    ];
    // campaign c7 has a number (another user's send), none of this user's
    const recordKey = await seedFormat2(namespace, userId, sends, T0, ["a:c7"]);
    expect((await capper.checkUser({ userId, channel: "a", at: T0 + 60 * SECOND })).decision).toBe("allowed");
    expect((await cluster.hgetBuffer(recordKey, String(userId)))?.[0]).toBeGreaterThanOrEqual(192);
    const reads: number[] = [];
    // a call that counts nothing lists 2 unlisted chunks: 74 take 37 calls, 13 rounds of 3
    for (let i = 0; i < 15; i++) {
      clock.set(T0 + i);
      reads.push(
        await chunkReadsOf(recordKey, async () => {
          const report = await capper.checkUser({ userId, channel: "a", campaignId: "c9" });
          expect(report.decision).toBe("duplicate");
        }),
      );
      for (const campaignId of ["c8", "c7"]) {
        reads.push(
          await chunkReadsOf(recordKey, async () => {
            const report = await capper.checkUser({ userId, channel: "a", campaignId });
            expect(report.decision).toBe("capped");
          }),
        );
      }
    }
    // c7's check read every unlisted chunk besides the joins c8's does; once they are listed, no more than c8's
    // (the joins stay: c9's old send makes two identities in the chunks, so none is counted in place)
    const [firstC7, lastC8, lastC7] = [reads[2], reads.at(-2), reads.at(-1)] as [number, number, number];
    expect(lastC7, `chunk fields read per check: ${reads.join(", ")}`).toBeLessThan(firstC7 - 60);
    expect(lastC7, `chunk fields read per check: ${reads.join(", ")}`).toBeLessThanOrEqual(lastC8);
  });
});

describe("attacks on a hot user's record: a format-2 tail", () => {
  it("decides and reports as the model does when a format-2 record with a tail turns chunked", async () => {
    const caps = { a: [{ window: "1s", max: 40 }], "*": [{ window: "3s", max: 90 }] };
    const rules = rulesOf({ version: "tail", channels: ["a", "b"], segments: [], default: { name: "r", caps } });
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 900, max: 3_000 }),
        fc.integer({ min: 0, max: 2 ** 31 }),
        fc.integer({ min: 1, max: 3 }),
        fc.array(checkArbitrary, { minLength: 5, maxLength: 25 }),
        async (count, seed, coldWrites, steps) => {
          const namespace = uniqueNamespace();
          const userId = 5 * 256 + 21;
          const clock = fixedClock(T0);
          const options = { store, rules: () => rules, clock, namespace, redeliveryMs: REDELIVERY };
          const cold = new Capper(options);
          const capper = new Capper({ ...options, hotRecords: true });
          const model = new CappingModel(rules.policy, () => 0, REDELIVERY);
          const next = lcg(seed);
          // sends over the 14 minutes before T0: those older than the windows' retention (~5 min) go to the tail
          // in the first format-2 write
          const names = ["a:", "b:", "a:o1", "b:o1", "a:o2", "a:s1", "b:s1", "a:s2", "b:s2", "a:x", "b:x"];
          const sends = Array.from({ length: count }, () => {
            const at = T0 - 840 * SECOND + (next() % (840 * SECOND));
            const name = names[next() % names.length] as string;
            return { at, identity: at > T0 - 600 * SECOND && name.includes(":o") ? "a:x" : name };
          });
          await seedFormat2(namespace, userId, sends, T0, names);
          for (const send of sends) {
            const [channel, campaignId] = send.identity.split(":") as [string, string];
            model.sendsOf(userId).push({ at: send.at, channel, campaignId });
          }
          let now = T0;
          for (let i = 0; i < coldWrites; i++) {
            now += 1;
            clock.set(now);
            await checkBoth(
              cold,
              model,
              rules,
              userId,
              { now, at: now, channel: "b", campaignId: "", consume: true },
              `cold ${i}`,
            );
          }
          now = await checkSteps(capper, model, rules, userId, clock, steps, now);
        },
      ),
      { numRuns: 30, endOnFailure: true },
    );
  }, 300_000);
});

describe("attacks on a hot user's record: retention over unlisted chunks", () => {
  it("decides resends as the model does while retention passes over chunks not yet listed", async () => {
    const caps = { a: [{ window: "1s", max: 30 }], "*": [{ window: "2s", max: 50 }] };
    const rules = rulesOf({ version: "expiry", channels: ["a", "b"], segments: [], default: { name: "r", caps } });
    const campaigns = Array.from({ length: 24 }, (_, i) => `k${i}`);
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 2_100, max: 6_000 }),
        fc.integer({ min: 0, max: 2 ** 31 }),
        fc.array(
          fc.record({
            elapsed: fc.integer({ min: 0, max: 40 * SECOND }),
            offset: fc.integer({ min: -2_000, max: 1_000 }),
            channel: fc.constantFrom("a", "b"),
            campaignId: fc.constantFrom("", ...campaigns),
            consume: fc.boolean(),
          }),
          { minLength: 5, maxLength: 30 },
        ),
        async (count, seed, steps) => {
          const userId = 5 * 256 + 31;
          const { namespace, clock, capper, model } = hotUserRun(rules);
          const next = lcg(seed);
          // over the 15 minutes before T0 (the retention: 15m01s), campaign k<i> only in the i-th 24th of it
          const span = 900 * SECOND;
          const sends = Array.from({ length: count }, () => {
            const at = T0 - span + (next() % span);
            const slot = Math.floor(((at - T0 + span) * campaigns.length) / span);
            const identity = next() % 3 === 0 ? `${next() % 2 ? "a" : "b"}:k${slot}` : `${next() % 2 ? "a" : "b"}:`;
            return { at, identity };
          });
          await seedFormat2(
            namespace,
            userId,
            sends,
            T0,
            campaigns.flatMap((k) => [`a:${k}`, `b:${k}`]),
          );
          for (const send of sends) {
            const [channel, campaignId] = send.identity.split(":") as [string, string];
            model.sendsOf(userId).push({ at: send.at, channel, campaignId });
          }
          let now = T0;
          now = await checkSteps(capper, model, rules, userId, clock, steps, now);
        },
      ),
      { numRuns: 40, endOnFailure: true },
    );
  }, 300_000);
});
