import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { parsePolicy } from "../../../functions/core/capping/policy.ts";
import { capTagOf, recordRangeOf } from "../../../sdk/src/protocol/index.ts";
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
import { CRAMPED, DENSE, runSteps, type StepInput, stepArbitrary } from "../../support/record-blob-steps.ts";
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

describe("record blobs under IDs whose bytes straddle other IDs (review of the string.find lookup)", () => {
  it("decides as the model does over random cramped, special-byte and edge IDs, checks and dense pages, through splits", async () => {
    await fc.assert(
      fc.asyncProperty(
        policyArbitrary,
        fc.constantFrom(90, 300, 8192),
        fc.array(stepArbitrary, { minLength: 5, maxLength: 20 }),
        async (policy, splitBytes, steps) => runSteps(scripts, policy, splitBytes, steps),
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
    channels: POLICY_CHANNELS,
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
      channels: POLICY_CHANNELS,
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
          await runSteps(scripts, policy, splitBytes, steps, true);
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
      channels: POLICY_CHANNELS,
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
