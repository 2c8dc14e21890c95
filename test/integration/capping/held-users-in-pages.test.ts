// Held users (quiet hours hold their sends) ride along in their pages' block-path arguments with no send: the
// users decided beside them are decided as the reference model decides a call without the held users, held
// users keep the history they had, and a page the batch reaches whole, held users included, is one argument
// of a call holding up to 4 such pages (as the same page without holds).
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import {
  HELD_PROFILE,
  planCapSends,
  readCapSendsReply,
  scriptProfiles,
} from "../../../functions/core/capping/cap-sends-script.ts";
import { keptHorizonMs, type Policy, parsePolicy } from "../../../functions/core/capping/policy.ts";
import { decisionOf } from "../../support/cap-sends-runner.ts";
import { CappingModel, type ModelCall, type ModelDecision } from "../../support/capping-model.ts";
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

const REDELIVERY_MS = 10 * 60_000;
// page 0 whole, 40 users of page 1 (the same tag), and a sparse user of the tag on a page of its own
const PAGE = Array.from({ length: 256 }, (_, i) => i);
const USERS = [...PAGE, ...Array.from({ length: 40 }, (_, i) => 256 + i), 300_000];

function request(
  policy: Policy,
  call: ModelCall,
  segmentOf: (user: number) => number,
  held: readonly number[],
  compactClasses = false,
) {
  const heldSet = new Set(held);
  const sortedIds = Uint32Array.from(call.users.filter((user) => !heldSet.has(user))).sort();
  return {
    namespace: "",
    now: call.now,
    at: call.at,
    mode: call.mode,
    compactClasses,
    channel: call.channel,
    campaignId: call.campaignId,
    forced: call.exemptCounted,
    horizonMs: keptHorizonMs(policy, REDELIVERY_MS),
    profiles: scriptProfiles(policy, call.channel, REDELIVERY_MS),
    sortedIds,
    segmentOf: Uint8Array.from(sortedIds, segmentOf),
    held: Uint32Array.from(heldSet).sort(),
  };
}

/** The decisions of the users not held, by user. */
async function runWithHeld(
  namespace: string,
  policy: Policy,
  segmentOf: (user: number) => number,
  call: ModelCall,
  held: readonly number[],
  compactClasses: boolean,
): Promise<Map<number, ModelDecision>> {
  const planned = request(policy, call, segmentOf, held, compactClasses);
  const byUser = new Map<number, ModelDecision>();
  for (const one of planCapSends({ ...planned, namespace })) {
    const { codes } = readCapSendsReply(await store.capSends(one.keys, one.args), one.members.length);
    one.members.forEach((member, m) => {
      byUser.set(planned.sortedIds[member] as number, decisionOf(codes[m] as number));
    });
  }
  return byUser;
}

const stepArbitrary = fc.record({
  users: fc.oneof(fc.constant(USERS), fc.constant(PAGE), fc.subarray(USERS, { minLength: 1 })),
  // each user held with this chance (0: none, 1: every user of the call)
  heldShare: fc.constantFrom(0, 0.1, 0.3, 0.9, 1),
  heldSeed: fc.integer({ min: 0, max: 2 ** 30 }),
  mode: fc.constantFrom("count", "count", "count", "peek"),
  elapsed: fc.oneof(
    { weight: 8, arbitrary: fc.integer({ min: 0, max: 4_000 }) },
    { weight: 1, arbitrary: fc.integer({ min: 60_000, max: 700_000 }) },
  ),
  channel: fc.constantFrom(...POLICY_CHANNELS),
  campaignId: fc.constantFrom("", "c1", "c2"),
});

describe("held users in their pages' arguments", () => {
  // blocks written at 2 bytes a user (format 5) and at the narrowest width (format 6)
  for (const compactClasses of [false, true]) {
    it(`leaves the held users' histories as they were and decides the others as the model decides a call without them (compact classes ${compactClasses ? "on" : "off"})`, async () => {
      await fc.assert(
        fc.asyncProperty(
          policyArbitrary,
          fc.integer({ min: 0, max: 5 }),
          fc.array(stepArbitrary, { minLength: 4, maxLength: 14 }),
          async (policy, seed, steps) => {
            const namespace = uniqueNamespace();
            const segmentOf = (user: number) => (user + seed) % policy.segments.length;
            const model = new CappingModel(policy, segmentOf, REDELIVERY_MS);
            let now = T0;
            for (const step of steps) {
              now += step.elapsed;
              const held = step.users.filter(
                (user) => ((Math.imul(user ^ step.heldSeed, 0x2545f491) >>> 0) % 1000) / 1000 < step.heldShare,
              );
              const heldSet = new Set(held);
              const call: ModelCall = {
                mode: step.mode as "count" | "peek",
                now,
                at: now,
                channel: step.channel,
                campaignId: step.campaignId,
                exemptCounted: false,
                users: step.users,
              };
              const decided = step.users.filter((user) => !heldSet.has(user));
              const expected = model.apply({ ...call, users: decided });
              const byUser = await runWithHeld(namespace, policy, segmentOf, call, held, compactClasses);
              expect(decided.map((user) => byUser.get(user))).toEqual(expected);
              expect(held.filter((user) => byUser.has(user))).toEqual([]);
            }
          },
        ),
        { numRuns: 20 },
      );
    });
  }

  it("plans a page reached whole with held users as one whole-page argument, 4 such pages a call", () => {
    const policy = parsePolicy({
      version: "held",
      channels: ["push"],
      segments: [],
      default: { name: "all", caps: { push: [{ window: "1d", max: 1 }] } },
    });
    // 4 pages of one tag (pages 0-3), every third user held
    const users = Array.from({ length: 1024 }, (_, i) => i);
    const held = users.filter((user) => user % 3 === 0);
    const call: ModelCall = {
      mode: "count",
      now: T0,
      at: T0,
      channel: "push",
      campaignId: "c",
      exemptCounted: false,
      users,
    };
    const withHeld = planCapSends(request(policy, call, () => 0, held));
    const withoutMask = planCapSends({ ...request(policy, call, () => 0, held), held: new Uint32Array(0) });
    expect(withHeld).toHaveLength(1);
    expect(withoutMask.length).toBeGreaterThan(1);
    const pages = (withHeld[0] as (typeof withHeld)[number]).args.slice(11) as Buffer[];
    expect(pages.map((page) => (page.length - 5) / 2)).toEqual([256, 256, 256, 256]);
    expect(pages.every((page) => page[1] === 1)).toBe(true);
    const heldPairs = pages.flatMap((page) =>
      Array.from({ length: (page.length - 5) / 2 }, (_, u) => page[6 + 2 * u]).filter((p) => p === HELD_PROFILE),
    );
    expect(heldPairs).toHaveLength(held.length);
  });
});
