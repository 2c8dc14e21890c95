// lua/cap-sends/ on the real cluster against the reference model (test/support/capping-model.ts):
// random policies, dense and sparse users, sends and peeks with skewed and backfilled times.
import { decode, decodeMulti, encode } from "@msgpack/msgpack";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import {
  type CallBounds,
  MAX_KEYS_PER_CALL,
  MAX_USERS_PER_CALL,
  planCapSends,
  REPLY_ALLOWED,
  readCapSendsReply,
  scriptProfiles,
} from "../../../functions/core/capping/cap-sends-script.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { keptHorizonMs, type Policy, parsePolicy } from "../../../functions/core/capping/policy.ts";
import { SegmentIndex } from "../../../functions/core/capping/segment-index.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { capBlobKey, capIdentityKey, capPageKey, capTagOf } from "../../../sdk/src/protocol/index.ts";
import { decodeBlock, decodeRecord, readUserRecord } from "../../support/block.ts";
import { decisionOf } from "../../support/cap-sends-runner.ts";
import { CappingModel, fullestWindow, type ModelCall, type ModelDecision } from "../../support/capping-model.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { POLICY_CHANNELS, policyArbitrary } from "../../support/policy-arbitrary.ts";
import { T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
let store: RedisCapStore;
beforeAll(() => {
  cluster = connectCluster();
  store = new RedisCapStore(cluster);
});
afterAll(async () => {
  await cluster.quit();
});

const CHANNELS = POLICY_CHANNELS;
/** How long a counted send's message may come back here: short, so a run sees sends expire from the tail. */
const REDELIVERY_MS = 10 * 60_000;
/** The property tests of page blocks run with blocks written at 2 bytes a user (format 5) and at the narrowest width (format 6). */
const COMPACT_CLASSES = [false, true] as const;
// 40 users of page 0 (a call with 16 or more of them goes through the page block), a user of another page
// of the same tag, and sparse users: four more of tag 0 on pages of their own in one record hash (a call
// decides each distinct record once and shares the outcome: their records must stay apart), and others
const DENSE = Array.from({ length: 40 }, (_, i) => i);
const SPARSE = [300, 262_144, 524_293, 786_441, 1_048_580, 70_001, 2_000_000_000, 4_294_967_295];

const callArbitrary = fc.record({
  users: fc.oneof(
    fc.subarray(DENSE, { minLength: 16 }),
    fc.subarray([...DENSE, ...SPARSE], { minLength: 1, maxLength: 4 }),
    fc.subarray(SPARSE, { minLength: 2 }),
    fc.subarray([...DENSE.slice(0, 20), ...SPARSE], { minLength: 1 }),
  ),
  mode: fc.constantFrom("count", "count", "count", "peek"),
  // mostly seconds; sometimes minutes, so named sends leave the window part for the idempotency tail and
  // later expire from it (REDELIVERY_MS is longer than any window here)
  elapsed: fc.oneof(
    { weight: 8, arbitrary: fc.integer({ min: 0, max: 4_000 }) },
    { weight: 1, arbitrary: fc.integer({ min: 60_000, max: 700_000 }) },
  ),
  // where `at` falls: a share of the deepest backfill (-1) to the skew bound (+1)
  skew: fc.double({ min: -1, max: 1, noNaN: true }),
  channel: fc.constantFrom(...CHANNELS),
  campaignId: fc.constantFrom("", "", "c1", "c2", "c3"),
});

/** Runs one call through the protocol module and the real script; decisions in the call's user order. */
async function runScript(
  namespace: string,
  policy: Policy,
  segmentOf: (user: number) => number,
  call: ModelCall,
  bounds?: CallBounds,
  blobSplitBytes?: number,
  compactClasses = false,
): Promise<ModelDecision[]> {
  const sortedIds = Uint32Array.from(call.users).sort();
  const calls = planCapSends(
    {
      namespace,
      now: call.now,
      at: call.at,
      mode: call.mode,
      ...(compactClasses ? { compactClasses } : {}),
      channel: call.channel,
      campaignId: call.campaignId,
      forced: call.exemptCounted,
      horizonMs: keptHorizonMs(policy, REDELIVERY_MS),
      profiles: scriptProfiles(policy, call.channel, REDELIVERY_MS),
      sortedIds,
      segmentOf: Uint8Array.from(sortedIds, segmentOf),
      ...(blobSplitBytes === undefined ? {} : { blobSplitBytes }),
    },
    bounds,
  );
  const byUser = new Map<number, ModelDecision>();
  for (const planned of calls) {
    const { codes } = readCapSendsReply(await store.capSends(planned.keys, planned.args), planned.members.length);
    planned.members.forEach((member, m) => {
      byUser.set(sortedIds[member] as number, decisionOf(codes[m] as number));
    });
  }
  return call.users.map((user) => byUser.get(user) as ModelDecision);
}

describe("cap-sends against the reference model", () => {
  for (const compactClasses of COMPACT_CLASSES) {
    it(`decides as the model does (idempotency for the redelivery bound included), and no window ever holds more than max counted sends (compact classes ${compactClasses ? "on" : "off"})`, async () => {
      await fc.assert(
        fc.asyncProperty(
          policyArbitrary,
          fc.integer({ min: 0, max: 5 }),
          fc.array(callArbitrary, { minLength: 5, maxLength: 25 }),
          async (policy, seed, calls) => {
            const namespace = uniqueNamespace();
            const segmentOf = (user: number) => (user + seed) % policy.segments.length;
            const model = new CappingModel(policy, segmentOf, REDELIVERY_MS);
            let now = T0;
            for (const step of calls) {
              now += step.elapsed;
              const reach = step.skew < 0 ? policy.backfillMs : Math.min(300_000, 3 * policy.backfillMs);
              const call: ModelCall = {
                mode: step.mode as "count" | "peek",
                now,
                at: now + Math.round(step.skew * reach),
                channel: step.channel,
                campaignId: step.campaignId,
                exemptCounted: false,
                users: step.users,
              };
              expect(await runScript(namespace, policy, segmentOf, call, undefined, undefined, compactClasses)).toEqual(
                model.apply(call),
              );
            }
            for (const user of model.users()) {
              const sends = model.sendsOf(user);
              for (const channel of CHANNELS) {
                for (const cap of policy.capsFor(segmentOf(user), channel)) {
                  const counted = sends
                    .filter((s) => cap.channel === "*" || s.channel === cap.channel)
                    .map((s) => s.at);
                  expect(fullestWindow(counted, cap.windowMs)).toBeLessThanOrEqual(cap.max);
                }
              }
            }
          },
        ),
        { numRuns: 25 },
      );
    });
  }
});

// Sparse users of tag 0, one per page, most in one record range (one blob), some in the next range: many users
// per blob, and with a small split size the blob splits into parts (and parts split again) as records grow
const BLOB_USERS = [
  ...Array.from({ length: 48 }, (_, i) => ((i * 37) % 2048) * 262_144 + ((i * 131) % 1024)),
  ...Array.from({ length: 8 }, (_, i) => 2 ** 29 + i * 262_144 + 7),
];

describe("cap-sends record blobs against the reference model", () => {
  it("decides as the model does with many sparse users per blob, through splits, with dense pages absorbing blob records", async () => {
    await fc.assert(
      fc.asyncProperty(
        policyArbitrary,
        fc.constantFrom(120, 400, 8192),
        fc.array(
          fc.record({
            users: fc.oneof(
              fc.subarray(BLOB_USERS, { minLength: 1 }),
              fc.subarray([...new Set([...BLOB_USERS, ...DENSE])], { minLength: 1 }),
            ),
            mode: fc.constantFrom("count", "count", "count", "peek"),
            elapsed: fc.oneof(
              { weight: 8, arbitrary: fc.integer({ min: 0, max: 4_000 }) },
              { weight: 1, arbitrary: fc.integer({ min: 60_000, max: 700_000 }) },
            ),
            skew: fc.double({ min: -1, max: 1, noNaN: true }),
            channel: fc.constantFrom(...CHANNELS),
            campaignId: fc.constantFrom("", "c1", "c2", "c3", "c4"),
          }),
          { minLength: 5, maxLength: 20 },
        ),
        async (policy, splitBytes, calls) => {
          const namespace = uniqueNamespace();
          const segmentOf = (user: number) => user % policy.segments.length;
          const model = new CappingModel(policy, segmentOf, REDELIVERY_MS);
          let now = T0;
          for (const step of calls) {
            now += step.elapsed;
            const reach = step.skew < 0 ? policy.backfillMs : Math.min(300_000, 3 * policy.backfillMs);
            const call: ModelCall = {
              mode: step.mode as "count" | "peek",
              now,
              at: now + Math.round(step.skew * reach),
              channel: step.channel,
              campaignId: step.campaignId,
              exemptCounted: false,
              users: step.users,
            };
            expect(await runScript(namespace, policy, segmentOf, call, undefined, splitBytes)).toEqual(
              model.apply(call),
            );
          }
          for (const user of model.users()) {
            const sends = model.sendsOf(user);
            for (const channel of CHANNELS) {
              for (const cap of policy.capsFor(segmentOf(user), channel)) {
                const counted = sends.filter((s) => cap.channel === "*" || s.channel === cap.channel).map((s) => s.at);
                expect(fullestWindow(counted, cap.windowMs)).toBeLessThanOrEqual(cap.max);
              }
            }
          }
        },
      ),
      { numRuns: 25 },
    );
  });

  it("splits a blob past its size into parts under a directory, and every user's record stays readable", async () => {
    const namespace = uniqueNamespace();
    const policy = parsePolicy({
      version: "p",
      channels: CHANNELS,
      segments: [],
      default: { name: "rest", caps: { a: [{ window: "1m", max: 3 }] } },
    });
    const users = BLOB_USERS.slice(0, 48);
    for (let round = 0; round < 3; round++) {
      // each user its own campaign: 48 distinct records, so the blob outgrows 300 bytes and splits
      for (const user of users) {
        const call: ModelCall = {
          mode: "count",
          now: T0 + round * 1000,
          at: T0 + round * 1000,
          channel: "a",
          campaignId: `c${round}-${user}`,
          exemptCounted: false,
          users: [user],
        };
        expect(await runScript(namespace, policy, () => 0, call, undefined, 300)).toEqual(["allowed"]);
      }
    }
    const directory = await cluster.getBuffer(capBlobKey(namespace, 0, 0));
    expect(directory?.[0]).toBe(2);
    expect((directory?.length ?? 0) - 1).toBeGreaterThan(4 * 2);
    for (const user of users) {
      const record = await readUserRecord(cluster, namespace, user);
      expect(decodeRecord(record as Buffer)).toHaveLength(3);
    }
    // all of them in one call: every one capped (3 in the minute), through the directory's parts
    const call: ModelCall = {
      mode: "count",
      now: T0 + 3000,
      at: T0 + 3000,
      channel: "a",
      campaignId: "all",
      exemptCounted: false,
      users,
    };
    expect(await runScript(namespace, policy, () => 0, call, undefined, 300)).toEqual(users.map(() => ({ capped: 0 })));
  });
});

// One page of 256 users over days: random halves diverge their histories (a class per user), so the block
// compacts its classes, and sends older than the retention (at least a day) leave it through event compactions
const PAGE = Array.from({ length: 256 }, (_, i) => i);
const HOUR = 3_600_000;
/** Whether `user` is in the half that `seed` picks (a mixing hash: every seed picks a different half). */
function halfOf(user: number, seed: number): boolean {
  let h = Math.imul(user ^ seed, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return ((h ^ (h >>> 16)) & 1) === 1;
}
const longCapArbitrary = fc.record({
  window: fc.constantFrom("1h", "3h", "1d"),
  max: fc.integer({ min: 1, max: 30 }),
});
const longPolicyArbitrary = fc
  .record({
    segments: fc.array(fc.record({ a: fc.array(longCapArbitrary, { maxLength: 2 }) }), { maxLength: 2 }),
    defaultCaps: fc.record({
      a: fc.array(longCapArbitrary, { maxLength: 2 }),
      "*": fc.array(longCapArbitrary, { maxLength: 1 }),
    }),
  })
  .map(({ segments, defaultCaps }) =>
    parsePolicy({
      version: "prop-long",
      channels: CHANNELS,
      segments: segments.map((caps, i) => ({ name: `s${i}`, bitmap: `segments/s${i}.roaring`, caps })),
      default: { name: "rest", caps: defaultCaps },
    }),
  );
const longCallArbitrary = fc.record({
  seed: fc.integer({ min: 1, max: 2 ** 30 }),
  mode: fc.constantFrom("count", "count", "count", "count", "peek"),
  elapsed: fc.integer({ min: 0, max: 3 * HOUR }),
  skew: fc.double({ min: -1, max: 1, noNaN: true }),
  channel: fc.constantFrom(...CHANNELS),
  campaignId: fc.constantFrom("", "c1", "c2", "c3", "c4", "c5", "c6"),
  exemptCounted: fc.constantFrom(false, false, false, true),
});

describe("a page block over days (compactions, divergent histories, sends ageing out)", () => {
  for (const compactClasses of COMPACT_CLASSES) {
    it(`decides as the model does through class and event compactions (compact classes ${compactClasses ? "on" : "off"})`, async () => {
      await fc.assert(
        fc.asyncProperty(
          longPolicyArbitrary,
          fc.array(longCallArbitrary, { minLength: 40, maxLength: 60 }),
          async (policy, calls) => {
            const namespace = uniqueNamespace();
            const segmentOf = (user: number) => user % policy.segments.length;
            const model = new CappingModel(policy, segmentOf, REDELIVERY_MS);
            let now = T0;
            for (const step of calls) {
              now += step.elapsed;
              const reach = step.skew < 0 ? policy.backfillMs : 300_000;
              // about half the page, a different half each call
              const users = PAGE.filter((user) => halfOf(user, step.seed));
              const call: ModelCall = {
                mode: step.mode as "count" | "peek",
                now,
                at: now + Math.round(step.skew * reach),
                channel: step.channel,
                campaignId: step.campaignId,
                exemptCounted: step.exemptCounted,
                users: users.length >= 16 ? users : PAGE,
              };
              expect(await runScript(namespace, policy, segmentOf, call, undefined, undefined, compactClasses)).toEqual(
                model.apply(call),
              );
            }
          },
        ),
        { numRuns: 6 },
      );
    });
  }

  // A page whose histories diverged counts each class's sends near `at` against the set of the page's events
  // a window can hold, and leaves out a cap whose window holds fewer of them than its max. Here the window
  // holds exactly max events, one each from max calls to random halves: the users in every half are capped
  // (the count reaches max only at the bound), and with one call fewer nobody is.
  for (const compactClasses of COMPACT_CLASSES) {
    it(`caps a diverged page's users exactly when the events a window holds reach the max (compact classes ${compactClasses ? "on" : "off"})`, async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.integer({ min: 2, max: 5 }),
          fc.array(fc.integer({ min: 1, max: 2 ** 30 }), { minLength: 8, maxLength: 8 }),
          fc.constantFrom("1h", "3h"),
          async (max, seeds, window) => {
            const policy = parsePolicy({
              version: "prop-bound",
              channels: CHANNELS,
              segments: [],
              default: { name: "rest", caps: { a: [{ window, max }] } },
            });
            const namespace = uniqueNamespace();
            const model = new CappingModel(policy, () => 0, REDELIVERY_MS);
            // a diverged page first (its own campaigns, aged out of the window), then max + 1 calls in the window
            let now = T0;
            for (const [i, seed] of seeds.entries()) {
              now += 4 * HOUR;
              const call: ModelCall = {
                mode: "count",
                now,
                at: now,
                channel: "a",
                campaignId: `old${i}`,
                exemptCounted: false,
                users: PAGE.filter((user) => halfOf(user, seed)),
              };
              expect(await runScript(namespace, policy, () => 0, call, undefined, undefined, compactClasses)).toEqual(
                model.apply(call),
              );
            }
            now += 4 * HOUR;
            for (let i = 0; i <= max; i++) {
              now += 60_000;
              const call: ModelCall = {
                mode: "count",
                now,
                at: now,
                channel: "a",
                campaignId: `new${i}`,
                exemptCounted: false,
                users: PAGE.filter((user) => halfOf(user, (seeds[i] as number) ^ 0x5bd1e995)),
              };
              expect(await runScript(namespace, policy, () => 0, call, undefined, undefined, compactClasses)).toEqual(
                model.apply(call),
              );
            }
          },
        ),
        { numRuns: 6 },
      );
    });
  }
});

// Whole pages of 256 users in one call: while the page's users share one history, the script decides each
// segment once and writes the page with string functions (no per-user work); segments with different caps
// then split the page's history, and later calls take the per-user loop. Both must decide as the model does.
const wholePageCapArbitrary = fc.record({
  window: fc.constantFrom("1s", "5s", "1m"),
  max: fc.integer({ min: 0, max: 3 }),
});
const wholePagePolicyArbitrary = fc
  .record({
    segments: fc.array(fc.record({ a: fc.array(wholePageCapArbitrary, { maxLength: 2 }) }), { maxLength: 3 }),
    defaultCaps: fc.record({ a: fc.array(wholePageCapArbitrary, { maxLength: 2 }) }),
  })
  .map(({ segments, defaultCaps }) =>
    parsePolicy({
      version: "prop-whole",
      channels: CHANNELS,
      segments: segments.map((caps, i) => ({ name: `s${i}`, bitmap: `segments/s${i}.roaring`, caps })),
      default: { name: "rest", caps: defaultCaps },
    }),
  );
const wholePageCallArbitrary = fc.record({
  // the whole page mostly; sometimes a part of it, or the whole page and a part of the next
  users: fc.oneof(
    { weight: 4, arbitrary: fc.constant(PAGE) },
    { weight: 1, arbitrary: fc.integer({ min: 16, max: 255 }).map((count) => PAGE.slice(256 - count)) },
    {
      weight: 1,
      arbitrary: fc
        .integer({ min: 16, max: 256 })
        .map((count) => [...PAGE, ...PAGE.map((u) => u + 256).slice(0, count)]),
    },
  ),
  mode: fc.constantFrom("count", "count", "count", "peek"),
  elapsed: fc.integer({ min: 0, max: 30_000 }),
  skew: fc.double({ min: -1, max: 1, noNaN: true }),
  channel: fc.constantFrom(...CHANNELS),
  campaignId: fc.constantFrom("", "c1", "c2", "c3"),
  exemptCounted: fc.constantFrom(false, false, false, true),
});

describe("page blocks as stored", () => {
  const policy = parsePolicy({
    version: "stored",
    channels: CHANNELS,
    segments: [],
    default: { name: "rest", caps: { a: [{ window: "1m", max: 2 }] } },
  });
  const segmentOf = () => 0;
  const call = (now: number, campaignId: string): ModelCall => ({
    mode: "count",
    now,
    at: now,
    channel: "a",
    campaignId,
    exemptCounted: false,
    users: PAGE,
  });

  it("stores one class's 2 bytes for a page whose users share it, and reads a format-4 block (512 class bytes) as before", async () => {
    const namespace = uniqueNamespace();
    const model = new CappingModel(policy, segmentOf, REDELIVERY_MS);
    const key = capPageKey(namespace, 0);
    expect(await runScript(namespace, policy, segmentOf, call(T0, "c1"))).toEqual(model.apply(call(T0, "c1")));
    const stored = (await cluster.getBuffer(key)) as Buffer;
    const values = [...decodeMulti(stored, { rawStrings: true })] as unknown[];
    expect(values[0]).toBe(5);
    expect((values[8] as Uint8Array).length).toBe(2);
    expect(decodeBlock(stored).history(255)).toEqual(["a:c1"]);
    // the same block as the format before wrote it: every user's 2 class bytes (strings as msgpack str, as the
    // script packs them; every byte here is under 128, so text keeps them)
    const text = (value: unknown): unknown =>
      value instanceof Uint8Array
        ? Buffer.from(value).toString("latin1")
        : Array.isArray(value)
          ? value.map(text)
          : value;
    const classBytes = Buffer.from(values[8] as Uint8Array);
    const before = [4, ...values.slice(1, 8), Buffer.concat(PAGE.map(() => classBytes))].map(text);
    await cluster.set(key, Buffer.concat(before.map((value) => encode(value))), "PX", await cluster.pttl(key));
    expect(decodeBlock((await cluster.getBuffer(key)) as Buffer).history(7)).toEqual(["a:c1"]);
    for (const [offset, campaignId] of [
      [1_000, "c2"],
      [2_000, "c3"],
      [3_000, "c1"],
    ] as const) {
      const next = call(T0 + offset, campaignId);
      expect(await runScript(namespace, policy, segmentOf, next)).toEqual(model.apply(next));
    }
  });

  it("keeps the tag's identity table (the page markers) at least as long as the blocks, without extending it at every call", async () => {
    const namespace = uniqueNamespace();
    const block = capPageKey(namespace, 0);
    const table = capIdentityKey(namespace, capTagOf(0));
    await runScript(namespace, policy, segmentOf, call(T0, "c1"));
    const first = await cluster.pttl(table);
    expect(first).toBeGreaterThanOrEqual(await cluster.pttl(block));
    // a minute later the block's TTL moves a minute on; the table's, set an eighth of the retention ahead, stays
    await runScript(namespace, policy, segmentOf, call(T0 + 60_000, "c2"));
    const second = await cluster.pttl(table);
    expect(second).toBeLessThanOrEqual(first);
    expect(second).toBeGreaterThanOrEqual(await cluster.pttl(block));
  });
});

describe("whole pages decided per segment", () => {
  for (const compactClasses of COMPACT_CLASSES) {
    it(`decides as the model does whether the page's users share a history or not (compact classes ${compactClasses ? "on" : "off"})`, async () => {
      await fc.assert(
        fc.asyncProperty(
          wholePagePolicyArbitrary,
          fc.integer({ min: 1, max: 256 }),
          fc.array(wholePageCallArbitrary, { minLength: 4, maxLength: 12 }),
          async (policy, stride, calls) => {
            const namespace = uniqueNamespace();
            // runs of `stride` users per segment: a page holds one segment or several
            const segmentOf = (user: number) => Math.floor(user / stride) % policy.segments.length;
            const model = new CappingModel(policy, segmentOf, REDELIVERY_MS);
            let now = T0;
            for (const step of calls) {
              now += step.elapsed;
              const reach = step.skew < 0 ? policy.backfillMs : Math.min(300_000, 3 * policy.backfillMs);
              const call: ModelCall = {
                mode: step.mode as "count" | "peek",
                now,
                at: now + Math.round(step.skew * reach),
                channel: step.channel,
                campaignId: step.campaignId,
                exemptCounted: step.exemptCounted,
                users: step.users,
              };
              expect(await runScript(namespace, policy, segmentOf, call, undefined, undefined, compactClasses)).toEqual(
                model.apply(call),
              );
            }
          },
        ),
        { numRuns: 15 },
      );
    });
  }
});

// Segments that repeat one another's caps (a policy may give several segments the same caps): the plan sends
// one profile for them, so a dense page's shared history is decided and extended once; decisions must stay
// each segment's own.
const sharedCapsPolicyArbitrary = fc
  .record({
    pool: fc.array(fc.record({ a: fc.array(wholePageCapArbitrary, { maxLength: 2 }) }), { minLength: 1, maxLength: 2 }),
    picks: fc.array(fc.nat(), { minLength: 1, maxLength: 4 }),
    defaultPick: fc.nat(),
  })
  .map(({ pool, picks, defaultPick }) =>
    parsePolicy({
      version: "prop-shared",
      channels: CHANNELS,
      segments: picks.map((pick, i) => ({
        name: `s${i}`,
        bitmap: `segments/s${i}.roaring`,
        caps: pool[pick % pool.length] as { a: { window: string; max: number }[] },
      })),
      default: { name: "rest", caps: pool[defaultPick % pool.length] as { a: { window: string; max: number }[] } },
    }),
  );

describe("segments with the same caps", () => {
  it("share one profile in a call and decide as the model does", async () => {
    await fc.assert(
      fc.asyncProperty(
        sharedCapsPolicyArbitrary,
        fc.integer({ min: 1, max: 64 }),
        fc.array(wholePageCallArbitrary, { minLength: 3, maxLength: 8 }),
        async (policy, stride, calls) => {
          const namespace = uniqueNamespace();
          const segmentOf = (user: number) => Math.floor(user / stride) % policy.segments.length;
          const model = new CappingModel(policy, segmentOf, REDELIVERY_MS);
          let now = T0;
          for (const step of calls) {
            now += step.elapsed;
            const reach = step.skew < 0 ? policy.backfillMs : Math.min(300_000, 3 * policy.backfillMs);
            const call: ModelCall = {
              mode: step.mode as "count" | "peek",
              now,
              at: now + Math.round(step.skew * reach),
              channel: step.channel,
              campaignId: step.campaignId,
              exemptCounted: step.exemptCounted,
              users: step.users,
            };
            expect(await runScript(namespace, policy, segmentOf, call)).toEqual(model.apply(call));
          }
        },
      ),
      { numRuns: 12 },
    );
  });

  it("sends one profile per distinct caps and retention, whatever the number of segments", () => {
    const caps = (max: number) => ({ a: [{ window: "1m", max }] });
    const policy = parsePolicy({
      version: "plan-shared",
      channels: CHANNELS,
      segments: [caps(1), caps(2), caps(1), caps(1)].map((c, i) => ({ name: `s${i}`, bitmap: `s${i}`, caps: c })),
      default: { name: "rest", caps: caps(2) },
    });
    const sortedIds = Uint32Array.from(PAGE);
    const [call] = planCapSends({
      namespace: "plan",
      now: T0,
      at: T0,
      mode: "count",
      channel: "a",
      campaignId: "c",
      forced: false,
      horizonMs: keptHorizonMs(policy, REDELIVERY_MS),
      profiles: scriptProfiles(policy, "a", REDELIVERY_MS),
      sortedIds,
      segmentOf: Uint8Array.from(sortedIds, (user) => user % 5),
    });
    const profiles = decode(call?.args[6] as Buffer) as [number[], number[], number[]][];
    expect(profiles.map(([, maxima]) => maxima)).toEqual([[1], [2]]);
    // each user's profile byte names the profile of its segment's caps
    const spec = call?.args[11] as Buffer;
    const profileOfUser = (user: number) => spec[5 + 2 * user + 1];
    expect(PAGE.map(profileOfUser)).toEqual(PAGE.map((user) => ([0, 2, 3].includes(user % 5) ? 0 : 1)));
  });
});

// Parts of pages (random halves of two 1,024-user groups): the plan gives such pages calls of their own
// (MAX_PARTIAL_PAGE_USERS_PER_CALL users of partial pages a call); the same traffic planned with up to 1,024
// users a call must decide the same, user by user, and as the model does.
const TWO_GROUPS = Array.from({ length: 2048 }, (_, i) => i);
const splitCallArbitrary = fc.record({
  seed: fc.integer({ min: 1, max: 2 ** 30 }),
  whole: fc.constantFrom(false, false, false, true),
  mode: fc.constantFrom("count", "count", "count", "peek"),
  elapsed: fc.integer({ min: 0, max: 3 * HOUR }),
  skew: fc.double({ min: -1, max: 1, noNaN: true }),
  channel: fc.constantFrom(...CHANNELS),
  campaignId: fc.constantFrom("", "c1", "c2", "c3", "c4", "c5", "c6"),
});

describe("calls split by page", () => {
  it("decide as the unsplit calls and the model do", async () => {
    await fc.assert(
      fc.asyncProperty(
        longPolicyArbitrary,
        fc.array(splitCallArbitrary, { minLength: 6, maxLength: 14 }),
        async (policy, calls) => {
          const split = uniqueNamespace();
          const unsplit = uniqueNamespace();
          const segmentOf = (user: number) => user % policy.segments.length;
          const model = new CappingModel(policy, segmentOf, REDELIVERY_MS);
          let now = T0;
          for (const step of calls) {
            now += step.elapsed;
            const reach = step.skew < 0 ? policy.backfillMs : 300_000;
            const call: ModelCall = {
              mode: step.mode as "count" | "peek",
              now,
              at: now + Math.round(step.skew * reach),
              channel: step.channel,
              campaignId: step.campaignId,
              exemptCounted: false,
              users: step.whole ? TWO_GROUPS : TWO_GROUPS.filter((user) => halfOf(user, step.seed)),
            };
            const expected = model.apply(call);
            expect(await runScript(split, policy, segmentOf, call)).toEqual(expected);
            expect(await runScript(unsplit, policy, segmentOf, call, { partialPageUsers: MAX_USERS_PER_CALL })).toEqual(
              expected,
            );
          }
        },
      ),
      { numRuns: 4 },
    );
  });

  it("puts a tag's sparse users in one call whatever their pages, and block-path pages within the 64-key bound", () => {
    const request = {
      namespace: "plan",
      now: T0,
      at: T0,
      mode: "count" as const,
      channel: "a",
      campaignId: "c",
      forced: false,
      horizonMs: 60_000,
      profiles: [{ caps: [], retentionMs: 60_000, windowRetentionMs: 60_000 }],
    };
    // 300 users of tag 0, each on a page of its own (one group of 1,024 IDs in 256 is tag 0)
    const sparse = Uint32Array.from({ length: 300 }, (_, i) => i * 256 * 1024 + (i % 256));
    const sparseCalls = planCapSends({ ...request, sortedIds: sparse, segmentOf: new Uint8Array(sparse.length) });
    expect(sparseCalls.map((call) => call.pages.length)).toEqual([300]);
    expect(sparseCalls[0]?.keys).toEqual([capIdentityKey("plan", 0)]);
    // 100 pages of tag 0 reached by 16 users each: block-path pages, each a key the call reads and writes
    const dense = Uint32Array.from({ length: 100 * 16 }, (_, i) => Math.floor(i / 16) * 256 * 1024 + (i % 16));
    const denseCalls = planCapSends({ ...request, sortedIds: dense, segmentOf: new Uint8Array(dense.length) });
    for (const call of denseCalls) {
      const ranges = String(call.args[9]).split(",").length;
      expect(1 + ranges + call.pages.length).toBeLessThanOrEqual(MAX_KEYS_PER_CALL);
    }
    expect(denseCalls.flatMap((call) => call.pages)).toHaveLength(100);
  });

  it("refuses a call whose key prefix is not its identity table's tag, or whose page or user is of another tag", async () => {
    const namespace = uniqueNamespace();
    const policy = parsePolicy({ version: "p", channels: CHANNELS, segments: [], default: { name: "rest", caps: {} } });
    const planned = (withWindows: boolean) => {
      const [call] = planCapSends({
        namespace,
        now: T0,
        at: T0,
        mode: "count",
        ...(withWindows ? { withWindows } : {}),
        channel: "a",
        campaignId: "c",
        forced: false,
        horizonMs: keptHorizonMs(policy, REDELIVERY_MS),
        profiles: scriptProfiles(policy, "a", REDELIVERY_MS),
        sortedIds: Uint32Array.from(withWindows ? [300] : [5, 300]),
        segmentOf: new Uint8Array(withWindows ? 1 : 2),
      });
      if (!call) throw new Error("no call planned");
      return call;
    };
    const call = planned(false);
    // a campaign call of record-path pages carries its range's users: byte 2 is 2, then IDs, then profiles
    expect(call.args).toHaveLength(12);
    expect([...(call.args[11] as Buffer)]).toEqual([1, 2, 0, 0, 0, 5, 0, 0, 1, 44, 0, 0]);
    const otherPrefix = [...call.args];
    otherPrefix[8] = `${namespace}:cap:{1}:`;
    await expect(store.capSends(call.keys, otherPrefix)).rejects.toThrow(/key prefix .* does not name the tag/);
    // user 300 (page 1: users 256..511) is of tag 0; user 1,068 (page 4: users 1,024..1,279) is of tag 1
    const otherUser = [...call.args];
    const users = Buffer.from(otherUser[11] as Buffer);
    users.writeUInt32BE(1_068, 6);
    otherUser[11] = users;
    await expect(store.capSends(call.keys, otherUser)).rejects.toThrow(/page 4 .* is not of the tag/);
    // an argument of users that is not its range's, or not whole users
    for (const broken of [Buffer.of(2, 2, 0, 0, 0, 5, 0), Buffer.of(1, 2, 0, 0, 0, 5, 0, 0)]) {
      const args = [...call.args];
      args[11] = broken;
      await expect(store.capSends(call.keys, args)).rejects.toThrow(/argument 12 is not the users of range 1/);
    }
    await expect(store.capSends(call.keys, [...call.args, call.args[11] as Buffer])).rejects.toThrow(
      /2 arguments of users for 1 ranges/,
    );
    // a check ("+windows") carries page arguments: page 1 made page 4
    const check = planned(true);
    const otherPage = [...check.args];
    const spec = Buffer.from(otherPage[11] as Buffer);
    expect([...spec]).toEqual([1, 0, 0, 0, 1, 44, 0]);
    spec.writeUIntBE(4, 2, 3);
    otherPage[11] = spec;
    await expect(store.capSends(check.keys, otherPage)).rejects.toThrow(/page 4 .* is not of the tag/);
    expect(await cluster.exists(capIdentityKey(namespace, 0))).toBe(0);
    expect(await cluster.exists(capIdentityKey(namespace, 1))).toBe(0);
    // the call as planned runs
    const { codes } = readCapSendsReply(await store.capSends(call.keys, call.args), 2);
    expect([...codes]).toEqual([REPLY_ALLOWED, REPLY_ALLOWED]);
  });

  it("puts at most one page's worth of a partial page's users in a call, and whole pages four to a call", () => {
    const request = {
      namespace: "plan",
      now: T0,
      at: T0,
      mode: "count" as const,
      channel: "a",
      campaignId: "c",
      forced: false,
      horizonMs: 60_000,
      profiles: [{ caps: [], retentionMs: 60_000, windowRetentionMs: 60_000 }],
    };
    const half = Uint32Array.from(TWO_GROUPS.filter((user) => halfOf(user, 7)));
    const halves = planCapSends({ ...request, sortedIds: half, segmentOf: new Uint8Array(half.length) });
    const pagesOf = (call: { pages: number[] }) => call.pages.length;
    expect(halves.length).toBe(8);
    expect(halves.every((call) => pagesOf(call) === 1)).toBe(true);
    const whole = Uint32Array.from(TWO_GROUPS);
    const wholes = planCapSends({ ...request, sortedIds: whole, segmentOf: new Uint8Array(whole.length) });
    expect(wholes.map(pagesOf)).toEqual([4, 4]);
  });
});

describe("batches decided together (one call per tag for their users)", () => {
  it("decide as the same batches one after another, sparse and dense users, with skewed and backfilled `at`", async () => {
    const users = [...DENSE, ...SPARSE, 1_000_003, 1_500_000_001, 262_145];
    await fc.assert(
      fc.asyncProperty(
        policyArbitrary,
        fc.array(
          fc.record({
            // each user in at most one batch of the round: batches with a user in common are planned apart
            batchOf: fc.array(fc.integer({ min: -1, max: 2 }), { minLength: users.length, maxLength: users.length }),
            elapsed: fc.integer({ min: 0, max: 3_000 }),
            skew: fc.integer({ min: -2_000, max: 2_000 }),
            campaignId: fc.constantFrom("c1", "c2", "c3"),
          }),
          { minLength: 2, maxLength: 5 },
        ),
        async (policy, rounds) => {
          const rules = { policy, segments: new SegmentIndex([]) };
          const clock = fixedClock(T0);
          const together = new Capper({ store, rules: () => rules, clock, namespace: uniqueNamespace() });
          const apart = new Capper({ store, rules: () => rules, clock, namespace: uniqueNamespace() });
          for (const round of rounds) {
            clock.advance(round.elapsed);
            const batches = [0, 1, 2]
              .map((b) => users.filter((_, i) => round.batchOf[i] === b))
              .filter((ids) => ids.length > 0)
              .map((userIds) => ({
                campaignId: round.campaignId,
                channel: "a",
                userIds,
                at: clock.now() + round.skew,
              }));
            // the same decisions, or the same refusal (a skew past the policy's backfill bound refuses `at`)
            const outcome = (result: PromiseSettledResult<{ decisions: unknown }>) =>
              result.status === "fulfilled" ? result.value.decisions : String(result.reason);
            const concurrent = await Promise.allSettled(batches.map((batch) => together.capBatch(batch)));
            for (const [b, batch] of batches.entries()) {
              const [alone] = await Promise.allSettled([apart.capBatch(batch)]);
              expect(outcome(concurrent[b] as PromiseSettledResult<{ decisions: unknown }>)).toEqual(
                outcome(alone as PromiseSettledResult<{ decisions: unknown }>),
              );
            }
          }
        },
      ),
      { numRuns: 6 },
    );
  });
});
