import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { keptMs, type Policy, parsePolicy } from "../../../functions/core/capping/policy.ts";
import { capTagOf } from "../../../sdk/src/protocol/index.ts";
import {
  type CapSendsCall,
  idOf,
  previousScript,
  REDELIVERY_MS,
  runScript,
  type Step,
} from "../../support/cap-sends-runner.ts";
import { CappingModel } from "../../support/capping-model.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { POLICY_CHANNELS, policyArbitrary } from "../../support/policy-arbitrary.ts";
import { T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
/** The store, and the script before the change (v0.2.0's, test/compat/v0.2.0/cap-sends.lua) as EVAL: a rollout runs both. */
let scripts: { store: RedisCapStore; previous: CapSendsCall };
beforeAll(() => {
  cluster = connectCluster();
  scripts = { store: new RedisCapStore(cluster), previous: previousScript(cluster, "capSendsPrevious9") };
});
afterAll(async () => {
  await cluster.quit();
});

// Tag 0 (byte 2 a multiple of 4, byte 3 below 4), ranges 0..3 (byte 1 / 32): sparse IDs on pages of their own
// mostly, some sharing a page, pattern-special and NUL bytes, range edges (0, 2^29, 2^31 - 256 + x)
const TAG0 = (() => {
  const ids = new Set<number>([0, 1, 0x25, idOf(0x1f, 0xfc, 0x03, 0xff), idOf(0x20, 0, 0, 0), idOf(0x20, 0, 0, 0x25)]);
  for (const b0 of [0x00, 0x05, 0x25, 0x2e, 0x3f, 0x40, 0x5e, 0x7f])
    for (const b1 of [0x00, 0x24, 0x5c, 0xfc])
      for (const b2 of [0, 1, 3]) ids.add(idOf(b0, b1, b2, (b0 + b1 + b2) % 256));
  return [...ids].sort((a, b) => a - b);
})();
for (const id of TAG0) if (capTagOf(id) !== 0) throw new Error(`${id} is not of tag 0`);

type Audience = "again" | "run" | "runPlus" | "superset" | "subset" | "fresh" | "check";
interface StepInput {
  audience: Audience;
  pick: number[];
  start: number;
  length: number;
  mode: "count" | "peek";
  elapsed: number;
  skew: number;
  channel: string;
  campaignId: string;
  exemptCounted: boolean;
  byPrevious: boolean;
  switchPolicy: boolean;
}
const stepArbitrary: fc.Arbitrary<StepInput> = fc.record({
  audience: fc.constantFrom<Audience>(
    "again",
    "again",
    "run",
    "run",
    "runPlus",
    "superset",
    "subset",
    "fresh",
    "check",
  ),
  pick: fc.array(fc.nat(), { minLength: 1, maxLength: 8 }),
  start: fc.nat(),
  length: fc.integer({ min: 1, max: 40 }),
  mode: fc.constantFrom("count", "count", "count", "peek"),
  elapsed: fc.oneof(
    { weight: 8, arbitrary: fc.integer({ min: 0, max: 3_000 }) },
    { weight: 1, arbitrary: fc.integer({ min: 60_000, max: 700_000 }) },
  ),
  skew: fc.oneof(
    { weight: 3, arbitrary: fc.constant(0) },
    { weight: 1, arbitrary: fc.double({ min: -1, max: 1, noNaN: true }) },
  ),
  channel: fc.constantFrom(...POLICY_CHANNELS),
  campaignId: fc.constantFrom("", "c1", "c2", "c3", "c4", "c5"),
  exemptCounted: fc.constantFrom(false, false, false, false, false, true),
  byPrevious: fc.constantFrom(false, false, false, true),
  switchPolicy: fc.constantFrom(false, false, false, false, false, false, false, true),
});

/** Whether `next` keeps every user's sends no longer than `previous` did, whatever the user's segment. */
function keepsNoLonger(next: Policy, previous: Policy): boolean {
  const kept = (policy: Policy) => policy.segments.map((_, segment) => keptMs(policy, segment, REDELIVERY_MS));
  return Math.max(...kept(next)) <= Math.min(...kept(previous));
}

async function runSteps(
  policies: [Policy, Policy],
  profiled: boolean,
  splitBytes: number | undefined,
  steps: StepInput[],
  mixed: boolean,
) {
  const namespace = uniqueNamespace();
  let policy = policies[0];
  const segmentOf = (user: number) => (profiled ? (user % 3) % policy.segments.length : 0);
  let model = new CappingModel(policy, segmentOf, REDELIVERY_MS);
  let now = T0;
  let last: number[] = TAG0.slice(0, 12);
  for (const step of steps) {
    now += step.elapsed;
    // one policy change, and only to a policy that keeps sends no longer than the first did: a longer one
    // after a shorter one would let the model recall sends the script dropped while the shorter one held (the
    // model keeps every send; the script cannot know what it rightly forgot). Seed 1964835278 found that: a
    // campaign sent again after its record was dropped under a 302 s horizon, then judged under 30 days
    if (step.switchPolicy && policy === policies[0] && keepsNoLonger(policies[1], policies[0])) {
      policy = policies[1];
      const next = new CappingModel(policy, segmentOf, REDELIVERY_MS);
      for (const user of model.users()) next.sendsOf(user).push(...model.sendsOf(user));
      model = next;
    }
    const known = [...new Set([...model.users(), ...last])].sort((a, b) => a - b);
    const pickFrom = (pool: number[]) => step.pick.map((k) => pool[k % pool.length] as number);
    let users: number[];
    switch (step.audience) {
      case "again":
        users = last;
        break;
      case "run":
      case "runPlus": {
        const from = step.start % known.length;
        users = known.slice(from, from + step.length);
        if (step.audience === "runPlus") users = [...users, ...pickFrom(TAG0)];
        break;
      }
      case "superset":
        users = [...last, ...pickFrom(TAG0)];
        break;
      case "subset":
        users = last.filter((_, i) => !step.pick.includes(i));
        break;
      case "fresh":
        users = TAG0.filter((_, i) => (i + step.start) % (1 + (step.length % 5)) === 0);
        break;
      default:
        users = [pickFrom(TAG0)[0] as number];
    }
    users = [...new Set(users)].sort((a, b) => a - b);
    if (users.length === 0) users = [TAG0[0] as number];
    const check = step.audience === "check";
    if (!check) last = users;
    const reach = step.skew < 0 ? policy.backfillMs : Math.min(300_000, 3 * policy.backfillMs);
    const call: Step = {
      mode: step.mode,
      now,
      at: now + Math.round(step.skew * reach),
      channel: step.channel,
      campaignId: check ? "" : step.campaignId,
      exemptCounted: check ? false : step.exemptCounted,
      users,
      withWindows: check,
      byPrevious: mixed && step.byPrevious,
    };
    const got = await runScript(scripts, namespace, policy, segmentOf, call, splitBytes);
    const want = model.apply(call);
    if (process.env.REVIEW_LOG && JSON.stringify(got) !== JSON.stringify(want)) {
      const caps = policies.map((p) => p.segments.map((_, s) => POLICY_CHANNELS.map((c) => p.capsFor(s, c))));
      console.log(
        JSON.stringify({
          caps,
          retention: policies.map((p) => p.segments.map((_, s) => p.retentionMs(s))),
          profiled,
          splitBytes,
          steps,
          mixed,
        }),
      );
    }
    expect(got, JSON.stringify({ step: { ...call, users: users.length }, users })).toEqual(want);
  }
}

describe("the whole-call sparse path against the model", () => {
  for (const mixed of [false, true]) {
    it(`decides as the model does over the same audience again, runs, supersets and subsets${mixed ? ", with the previous script running some calls" : ""}`, async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.tuple(policyArbitrary, policyArbitrary),
          fc.boolean(),
          fc.constantFrom(undefined, 300, 1024, 8192),
          fc.array(stepArbitrary, { minLength: 6, maxLength: 24 }),
          async (policies, profiled, splitBytes, steps) => runSteps(policies, profiled, splitBytes, steps, mixed),
        ),
        {
          numRuns: Number(process.env.REVIEW_RUNS ?? 100),
          ...(process.env.REVIEW_SEED
            ? { seed: Number(process.env.REVIEW_SEED), path: process.env.REVIEW_PATH, endOnFailure: true }
            : {}),
        },
      );
    });
  }
});

// Tags whose page-pattern sets hold the bytes a set gives a meaning to (% - ] ^) and NUL, and calls of up to 48
// profiles (a profile byte that is a pattern special: $ % ( ) . ? [ ]), each user of its own profile
function idInTag(tag: number, k: number, j: number, offset: number): number {
  return (tag + 256 * k) * 1024 + j * 256 + offset;
}
const SPECIAL_TAGS = [0, 75, 87, 137, 201, 255];
const PROFILES = 48;
const manyPolicy = parsePolicy({
  version: "many",
  channels: POLICY_CHANNELS,
  segments: Array.from({ length: PROFILES - 1 }, (_, i) => ({
    name: `s${i}`,
    bitmap: `segments/s${i}.roaring`,
    caps: { a: [{ window: `${i + 1}s`, max: 1 + (i % 3) }] },
  })),
  default: { name: "rest", caps: { a: [{ window: "1m", max: 2 }] } },
});

describe("the whole-call sparse path under special-byte tags and many profiles", () => {
  it("decides as the model does (the same audience again, runs, fresh users; users of up to 48 profiles)", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...SPECIAL_TAGS),
        fc.boolean(),
        fc.array(
          fc.record({
            audience: fc.constantFrom("again", "again", "run", "fresh"),
            start: fc.nat(),
            length: fc.integer({ min: 1, max: 60 }),
            elapsed: fc.integer({ min: 0, max: 3_000 }),
            campaignId: fc.constantFrom("", "c1", "c2", "c3"),
            byPrevious: fc.constantFrom(false, false, false, true),
          }),
          { minLength: 4, maxLength: 12 },
        ),
        async (tag, oneProfile, steps) => {
          // 96 sparse users of the tag over its 4 ranges (k spreads them: 2^29 / 2^18 = 2048 k per range)
          const pool = Array.from({ length: 96 }, (_, i) =>
            idInTag(tag, (i % 4) * 2048 + ((i * 37) % 2048), i % 4, (i * 91 + tag) % 256),
          ).sort((a, b) => a - b);
          for (const id of pool) if (capTagOf(id) !== tag) throw new Error(`${id} not of tag ${tag}`);
          const segmentOf = (user: number) => (oneProfile ? 40 : Math.floor(user / 1024) % PROFILES);
          const model = new CappingModel(manyPolicy, segmentOf, REDELIVERY_MS);
          const namespace = uniqueNamespace();
          let now = T0;
          let last = pool.slice(0, 48);
          for (const step of steps) {
            now += step.elapsed;
            const from = step.start % pool.length;
            const users =
              step.audience === "again"
                ? last
                : step.audience === "run"
                  ? pool.slice(from, from + step.length)
                  : pool.filter((_, i) => (i + step.start) % 3 === 0);
            last = users;
            const call: Step = {
              mode: "count",
              now,
              at: now,
              channel: "a",
              campaignId: step.campaignId,
              exemptCounted: false,
              users,
              withWindows: false,
              byPrevious: step.byPrevious,
            };
            const got = await runScript(scripts, namespace, manyPolicy, segmentOf, call, 8192);
            expect(got, JSON.stringify({ tag, oneProfile, step })).toEqual(model.apply(call));
          }
        },
      ),
      { numRuns: Number(process.env.REVIEW_RUNS ?? 100) },
    );
  });
});

describe("a range whose users share a profile numbered with a pattern-special byte", () => {
  it("decides as the model does when range 1's one profile is the call's 37th..48th ($ % ( ) * + - . ...)", async () => {
    for (let k = 33; k < PROFILES; k++) {
      // range 0: k users of k profiles (call profiles 0..k-1); range 1: 4 users of one more (call profile k)
      const low = Array.from({ length: k }, (_, i) => idInTag(87, 3 * i + 1, i % 4, (i * 7) % 256));
      const high = Array.from({ length: 4 }, (_, i) => idInTag(87, 2048 + 5 * i, 1, 0x25 + i));
      const segment = new Map<number, number>([
        ...low.map((u, i): [number, number] => [u, i]),
        ...high.map((u): [number, number] => [u, k]),
      ]);
      const segmentOf = (user: number) => segment.get(user) as number;
      const model = new CappingModel(manyPolicy, segmentOf, REDELIVERY_MS);
      const namespace = uniqueNamespace();
      const users = [...low, ...high];
      let now = T0;
      for (const [campaignId, audience] of [
        ["c1", users],
        ["c2", users],
        ["c2", users],
        ["c3", high],
        ["c4", users],
        ["", high],
      ] as [string, number[]][]) {
        now += 10;
        const call: Step = {
          mode: "count",
          now,
          at: now,
          channel: "a",
          campaignId,
          exemptCounted: false,
          users: audience,
          withWindows: false,
        };
        const got = await runScript(scripts, namespace, manyPolicy, segmentOf, call, 8192);
        expect(got, JSON.stringify({ k, campaignId })).toEqual(model.apply(call));
      }
    }
  });
});

describe("the whole-call sparse path with busy users (a record outgrowing 512 bytes leaves the blob for the hash)", () => {
  it("decides as the model does over dozens of campaigns to the same few users, runs of them and dense pages", async () => {
    const busyPolicy = parsePolicy({
      version: "busy",
      channels: POLICY_CHANNELS,
      segments: [{ name: "s0", bitmap: "segments/s0.roaring", caps: { a: [{ window: "1h", max: 150 }] } }],
      default: { name: "rest", caps: { a: [{ window: "1h", max: 160 }], "*": [{ window: "1m", max: 140 }] } },
    });
    const dense = Array.from({ length: 20 }, (_, i) => idOf(0, 0, 1, 0x40 + i));
    await fc.assert(
      fc.asyncProperty(
        fc.shuffledSubarray(TAG0, { minLength: 3, maxLength: 8 }),
        fc.array(
          fc.record({
            kind: fc.constantFrom("again", "again", "again", "again", "run", "dense", "repeat", "check"),
            start: fc.nat(),
            length: fc.integer({ min: 1, max: 8 }),
            elapsed: fc.integer({ min: 0, max: 300 }),
            channel: fc.constantFrom("a", "a", "a", "b"),
            byPrevious: fc.constantFrom(false, false, false, true),
          }),
          { minLength: 90, maxLength: 130 },
        ),
        fc.constantFrom(undefined, 8192),
        async (picked, steps, splitBytes) => {
          const users = [...picked].sort((a, b) => a - b);
          const segmentOf = (user: number) => user % 2;
          const model = new CappingModel(busyPolicy, segmentOf, REDELIVERY_MS);
          const namespace = uniqueNamespace();
          let now = T0;
          for (const [i, step] of steps.entries()) {
            now += step.elapsed;
            const from = step.start % users.length;
            const audience =
              step.kind === "run"
                ? users.slice(from, from + step.length)
                : step.kind === "dense"
                  ? [...new Set([...dense, ...users])].sort((a, b) => a - b)
                  : step.kind === "check"
                    ? [users[from] as number]
                    : users;
            const check = step.kind === "check";
            const call: Step = {
              mode: "count",
              now,
              at: now,
              channel: step.channel,
              campaignId: check ? "" : step.kind === "repeat" ? `c${Math.max(0, i - 3)}` : `c${i}`,
              exemptCounted: false,
              users: audience,
              withWindows: check,
              byPrevious: step.byPrevious,
            };
            const got = await runScript(scripts, namespace, busyPolicy, segmentOf, call, splitBytes);
            expect(got, JSON.stringify({ i, step, audience })).toEqual(model.apply(call));
          }
        },
      ),
      { numRuns: Number(process.env.REVIEW_RUNS ?? 100) / 10 },
    );
  });
});

describe("a sparse call handed to the general path by its second range", () => {
  it("decides as the model does when range 1's user outgrows the blob while range 0's users are decided fast", async () => {
    const policy = parsePolicy({
      version: "handover",
      channels: POLICY_CHANNELS,
      segments: [],
      default: { name: "rest", caps: { a: [{ window: "1h", max: 120 }] } },
    });
    // A, B in range 0, C in range 1 (tag 0)
    const [A, B, C] = [idOf(0, 0x24, 1, 7), idOf(0x05, 0, 0, 0x25), idOf(0x20, 0, 0, 0)];
    const model = new CappingModel(policy, () => 0, REDELIVERY_MS);
    const namespace = uniqueNamespace();
    let now = T0;
    const send = async (users: number[], campaignId: string, byPrevious = false) => {
      now += 100;
      const call: Step = {
        mode: "count",
        now,
        at: now,
        channel: "a",
        campaignId,
        exemptCounted: false,
        users,
        withWindows: false,
        byPrevious,
      };
      const got = await runScript(scripts, namespace, policy, () => 0, call, 8192);
      expect(got, JSON.stringify({ users, campaignId, byPrevious })).toEqual(model.apply(call));
    };
    // C's record grows alone to ~60 sends, then A and B join: C's record passes 512 bytes in a call whose
    // range 0 the sparse path has already decided
    for (let i = 0; i < 60; i++) await send([C], `c${i}`);
    for (let i = 60; i < 110; i++) {
      await send([A, B, C], `c${i}`, i % 7 === 0);
      if (i % 5 === 0) await send([A, B, C], `c${i}`);
      if (i % 9 === 0) await send([A, C], `c${i - 1}`);
    }
    for (let i = 0; i < 110; i += 13) await send([A, B, C], `c${i}`, true);
  });
});
