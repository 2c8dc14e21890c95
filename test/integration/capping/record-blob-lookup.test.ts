import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { type Policy, parsePolicy } from "../../../functions/core/capping/policy.ts";
import { capTagOf, recordRangeOf } from "../../../sdk/src/protocol/index.ts";
import {
  type CapSendsCall,
  idOf,
  previousScript,
  REDELIVERY_MS,
  runScript,
  type Step,
} from "../../support/cap-sends-runner.ts";
import { CappingModel, fullestWindow } from "../../support/capping-model.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { POLICY_CHANNELS, policyArbitrary } from "../../support/policy-arbitrary.ts";
import { T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
/** The store, and the script before the change (v0.2.0's, test/compat/v0.2.0/cap-sends.lua) as EVAL: a rollout runs both. */
let scripts: { store: RedisCapStore; previous: CapSendsCall };
beforeAll(() => {
  cluster = connectCluster();
  scripts = { store: new RedisCapStore(cluster), previous: previousScript(cluster, "capSendsPrevious") };
});
afterAll(async () => {
  await cluster.quit();
});

const CHANNELS = POLICY_CHANNELS;

// Tag 0, range 0: byte 1 below 32, byte 2 a multiple of 4, byte 3 below 4 (capTagOf, recordRangeOf). Bytes
// from a small alphabet, so an ID's 4 bytes often occur misaligned in the sorted ID section of its blob.
const CRAMPED = (() => {
  const ids = new Set<number>();
  for (const b0 of [0, 1, 2, 3, 4, 8])
    for (const b1 of [0, 4, 8])
      for (const b2 of [0, 1, 2, 3]) for (const b3 of [0, 1, 2, 3, 4, 8]) ids.add(idOf(b0, b1, b2, b3));
  return [...ids];
})();
// Pattern specials and NUL in every byte position (each ID in some tag and range; several share a blob)
const SPECIALS = [0x25, 0x2e, 0x5b, 0x5e, 0x24, 0x00, 0x28, 0x2a];
const SPECIAL_IDS = (() => {
  const ids = new Set<number>();
  for (const a of SPECIALS)
    for (const b of [0x25, 0x5b, 0x00]) {
      if (a >= 0x80) continue;
      ids.add(idOf(a, 0x24, b & 0xfc, 0x25));
      ids.add(idOf(a, 0x24, b & 0xfc, 0x2e));
      ids.add(idOf(a & 0x7f, 0x5c, 0x2b, b));
    }
  return [...ids];
})();
// A page of tag 0 range 0 dense enough for the block path, next to the cramped IDs
const DENSE = Array.from({ length: 24 }, (_, i) => idOf(0, 0, 0, 0x10 + i));
const EDGES = [0, 1, 2 ** 31 - 1, 2 ** 31 - 2, 2 ** 31 - 256, 255, 256, 1023, 1024];

for (const id of CRAMPED) {
  if (capTagOf(id) !== 0 || recordRangeOf(id) !== 0) throw new Error(`${id} is not of tag 0, range 0`);
}

const ALL = [...new Set([...CRAMPED, ...SPECIAL_IDS, ...EDGES])];
interface StepInput {
  kind: "campaign" | "check" | "dense";
  users: number[];
  dense: number[];
  check: number;
  mode: "count" | "peek";
  elapsed: number;
  skew: number;
  channel: string;
  campaignId: string;
  exemptCounted: boolean;
  byPrevious: boolean;
}
const stepArbitrary: fc.Arbitrary<StepInput> = fc.record({
  kind: fc.constantFrom("campaign", "campaign", "campaign", "check", "dense"),
  users: fc.oneof(
    fc.subarray(CRAMPED, { minLength: 1, maxLength: 40 }),
    fc.subarray(ALL, { minLength: 1, maxLength: 60 }),
    fc.subarray([...SPECIAL_IDS, ...EDGES], { minLength: 1 }),
    fc.array(fc.constantFrom(...CRAMPED, ...EDGES), { minLength: 1, maxLength: 12 }),
  ),
  dense: fc.subarray(DENSE, { minLength: 16 }),
  check: fc.constantFrom(...ALL),
  mode: fc.constantFrom("count", "count", "count", "peek"),
  elapsed: fc.oneof(
    { weight: 8, arbitrary: fc.integer({ min: 0, max: 4_000 }) },
    { weight: 1, arbitrary: fc.integer({ min: 60_000, max: 700_000 }) },
  ),
  skew: fc.double({ min: -1, max: 1, noNaN: true }),
  channel: fc.constantFrom(...CHANNELS),
  campaignId: fc.constantFrom("", "c1", "c2", "c3", "c4", "c5", "c6", "c7"),
  exemptCounted: fc.constantFrom(false, false, false, false, true),
  byPrevious: fc.boolean(),
});

async function runSteps(policy: Policy, splitBytes: number, steps: StepInput[], mixed = false) {
  const namespace = uniqueNamespace();
  const segmentOf = (user: number) => user % policy.segments.length;
  const model = new CappingModel(policy, segmentOf, REDELIVERY_MS);
  let now = T0;
  for (const step of steps) {
    now += step.elapsed;
    const reach = step.skew < 0 ? policy.backfillMs : Math.min(300_000, 3 * policy.backfillMs);
    const users =
      step.kind === "check"
        ? [step.check]
        : step.kind === "dense"
          ? [...new Set([...step.dense, ...step.users])]
          : [...new Set(step.users)];
    const call: Step = {
      mode: step.mode,
      now,
      at: now + Math.round(step.skew * reach),
      channel: step.channel,
      campaignId: step.kind === "check" ? "" : step.campaignId,
      exemptCounted: step.kind === "check" ? false : step.exemptCounted,
      users,
      withWindows: step.kind === "check",
      byPrevious: mixed && step.byPrevious,
    };
    // the script is handed the users unsorted, and with repeats (planCapSends dedupes them)
    const handed: Step = { ...call, users: [...step.users.filter((u) => users.includes(u)), ...users].reverse() };
    const got = await runScript(scripts, namespace, policy, segmentOf, handed, splitBytes);
    const byUser = new Map(handed.users.map((u, i) => [u, got[i]]));
    expect(
      users.map((u) => byUser.get(u)),
      JSON.stringify({ step: call }),
    ).toEqual(model.apply(call));
  }
  // exempt sends are counted without checks: only a run without them bounds every window by its cap
  if (steps.some((step) => step.exemptCounted && step.kind !== "check")) return;
  for (const user of model.users()) {
    const sends = model.sendsOf(user);
    for (const channel of CHANNELS) {
      for (const cap of policy.capsFor(segmentOf(user), channel)) {
        const counted = sends.filter((s) => cap.channel === "*" || s.channel === cap.channel).map((s) => s.at);
        expect(fullestWindow(counted, cap.windowMs)).toBeLessThanOrEqual(cap.max);
      }
    }
  }
}

describe("record blobs under IDs whose bytes straddle other IDs (review of the string.find lookup)", () => {
  it("decides as the model does over random cramped, special-byte and edge IDs, checks and dense pages, through splits", async () => {
    await fc.assert(
      fc.asyncProperty(
        policyArbitrary,
        fc.constantFrom(90, 300, 8192),
        fc.array(stepArbitrary, { minLength: 5, maxLength: 20 }),
        async (policy, splitBytes, steps) => runSteps(policy, splitBytes, steps),
      ),
      { numRuns: Number(process.env.REVIEW_RUNS ?? 30) },
    );
  });

  // X = 01 04 02 08 and Y = 02 0c 01 05 are neighbours in the blob; T = 02 08 02 0c is X's last two bytes and
  // Y's first two: a lookup of T finds it misaligned, and T is not a user of the blob
  const X = idOf(0x01, 0x04, 0x02, 0x08);
  const Y = idOf(0x02, 0x0c, 0x01, 0x05);
  const T = idOf(0x02, 0x08, 0x02, 0x0c);
  // P = 00 04 03 08, Q = 01 00 00 00 neighbours, R = 03 08 01 00 after them (P's last two, Q's first two):
  // R is a user of the blob, found misaligned first
  const P = idOf(0x00, 0x04, 0x03, 0x08);
  const Q = idOf(0x01, 0x00, 0x00, 0x00);
  const R = idOf(0x03, 0x08, 0x01, 0x00);
  const onePolicy = parsePolicy({
    version: "p",
    channels: CHANNELS,
    segments: [],
    default: { name: "rest", caps: { a: [{ window: "1m", max: 2 }] } },
  });

  async function send(namespace: string, users: number[], campaignId: string, at: number, withWindows = false) {
    return runScript(
      scripts,
      namespace,
      onePolicy,
      () => 0,
      { mode: "count", now: at, at, channel: "a", campaignId, exemptCounted: false, users, withWindows },
      8192,
    );
  }

  it("does not take a user for the one whose bytes straddle its neighbours (T between X and Y)", async () => {
    for (const id of [X, Y, T]) expect([capTagOf(id), recordRangeOf(id)]).toEqual([0, 0]);
    const namespace = uniqueNamespace();
    // X and Y: two sends each (capped from then on); T none
    expect(await send(namespace, [X, Y], "c1", T0)).toEqual(["allowed", "allowed"]);
    expect(await send(namespace, [X, Y], "c2", T0 + 1)).toEqual(["allowed", "allowed"]);
    expect(await send(namespace, [T], "c3", T0 + 2)).toEqual(["allowed"]);
    expect(await send(namespace, [X, T, Y], "c4", T0 + 3)).toEqual([{ capped: 0 }, "allowed", { capped: 0 }]);
    expect(await send(namespace, [T], "c5", T0 + 4)).toEqual([{ capped: 0 }]);
    // a retried batch counts nothing twice
    expect(await send(namespace, [X, T, Y], "c4", T0 + 5)).toEqual([{ capped: 0 }, "duplicate", { capped: 0 }]);
  });

  it("finds a user of the blob after a misaligned occurrence of its bytes (R after P and Q)", async () => {
    for (const id of [P, Q, R]) expect([capTagOf(id), recordRangeOf(id)]).toEqual([0, 0]);
    const namespace = uniqueNamespace();
    expect(await send(namespace, [P, Q, R], "c1", T0)).toEqual(["allowed", "allowed", "allowed"]);
    expect(await send(namespace, [R], "c2", T0 + 1)).toEqual(["allowed"]);
    expect(await send(namespace, [P, Q, R], "c3", T0 + 2)).toEqual(["allowed", "allowed", { capped: 0 }]);
    expect(await send(namespace, [R], "c4", T0 + 3)).toEqual([{ capped: 0 }]);
    // a check of R (its record read, a "+windows" call) and of P
    expect(await send(namespace, [R], "", T0 + 4, true)).toEqual([{ capped: 0 }]);
    expect(await send(namespace, [P], "", T0 + 4, true)).toEqual([{ capped: 0 }]);
    expect(await send(namespace, [Q, R], "c1", T0 + 5)).toEqual(["duplicate", "duplicate"]);
  });
});

describe("record blobs with busy users (records past 512 bytes move to the hash) and classes piling up", () => {
  it("decides as the model does when a few cramped users get dozens of campaigns, with checks and dense pages", async () => {
    const policy = parsePolicy({
      version: "busy",
      channels: CHANNELS,
      segments: [{ name: "s0", bitmap: "segments/s0.roaring", caps: { a: [{ window: "1h", max: 110 }] } }],
      default: { name: "rest", caps: { a: [{ window: "1h", max: 120 }], "*": [{ window: "1m", max: 100 }] } },
    });
    await fc.assert(
      fc.asyncProperty(
        fc.shuffledSubarray(CRAMPED, { minLength: 2, maxLength: 5 }),
        fc.array(
          fc.record({
            pick: fc.array(fc.nat(), { minLength: 1, maxLength: 4 }),
            kind: fc.constantFrom("campaign", "campaign", "campaign", "campaign", "check", "dense", "repeat"),
            elapsed: fc.integer({ min: 0, max: 400 }),
            channel: fc.constantFrom("a", "a", "a", "b"),
          }),
          { minLength: 100, maxLength: 160 },
        ),
        fc.constantFrom(90, 600, 8192),
        async (users, picks, splitBytes) => {
          const steps: StepInput[] = picks.map((p, i) => ({
            kind: p.kind === "repeat" ? "campaign" : p.kind,
            users: p.pick.map((k) => users[k % users.length] as number),
            dense: DENSE,
            check: users[(p.pick[0] as number) % users.length] as number,
            mode: "count",
            elapsed: p.elapsed,
            skew: 0,
            channel: p.channel,
            campaignId: p.kind === "repeat" ? `c${Math.max(0, i - 3)}` : `c${i}`,
            exemptCounted: false,
            byPrevious: i % 4 === 3,
          }));
          await runSteps(policy, splitBytes, steps, true);
        },
      ),
      { numRuns: Number(process.env.REVIEW_RUNS ?? 30) / 3 },
    );
  });
});

describe("a message of 90,000 scattered IDs (record blobs of about 90 users, the default split size)", () => {
  it("decides as the model does over campaigns, a retried campaign, a subset's campaign and checks", async () => {
    const policy = parsePolicy({
      version: "large",
      channels: CHANNELS,
      segments: [],
      default: { name: "rest", caps: { a: [{ window: "1d", max: 2 }] } },
    });
    let seed = 20_261_127;
    const all = Array.from({ length: 90_000 }, () => {
      seed = (Math.imul(seed, 1_103_515_245) + 12_345) >>> 0;
      return seed >>> 1;
    });
    const users = [...new Set(all)];
    const namespace = uniqueNamespace();
    const model = new CappingModel(policy, () => 0, REDELIVERY_MS);
    const some = users.filter((_, i) => i % 3 === 0);
    const checked = users.filter((_, i) => i % 1500 === 1);
    const steps: [number[], string, boolean][] = [
      [users, "c1", false],
      [some, "c2", false],
      ...checked.map((u): [number[], string, boolean] => [[u], "", true]),
      [users, "c3", false],
      [users, "c3", false],
      [users, "c4", false],
    ];
    let now = T0;
    for (const [ids, campaignId, withWindows] of steps) {
      now += 1_000;
      const call: Step = {
        mode: "count",
        now,
        at: now,
        channel: "a",
        campaignId,
        exemptCounted: false,
        users: ids,
        withWindows,
      };
      const got = await runScript(scripts, namespace, policy, () => 0, call, undefined, !withWindows);
      const want = model.apply(call);
      const wrong = ids.filter((_, i) => JSON.stringify(got[i]) !== JSON.stringify(want[i]));
      expect(wrong.slice(0, 5), `${campaignId}: ${wrong.length} users decided otherwise`).toEqual([]);
    }
  });
});
