// lua/cap-sends/'s whole-call sparse path (every page a record-path page, each range's users new to an
// empty blob or a run of its users) where it hands a call to the general path: a busy user's record
// outgrowing the blob, a profile the call does not carry, a page with a block (its marker found by listing the
// identity table's markers, or by page in a table of many fields).
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import {
  planCapSends,
  REPLY_ALLOWED,
  REPLY_DUPLICATE,
  REPLY_FIRST_CAP,
  readCapSendsReply,
  scriptProfiles,
} from "../../../functions/core/capping/cap-sends-script.ts";
import { keptHorizonMs, parsePolicy } from "../../../functions/core/capping/policy.ts";
import { capBlobKey, capIdentityKey, capRecordKey } from "../../../sdk/src/protocol/index.ts";
import { asPageArgs, decisionOf } from "../../support/cap-sends-runner.ts";
import { CappingModel, type ModelDecision } from "../../support/capping-model.ts";
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
// two users of tag 0, range 0, on pages of their own
const USERS = [300, 262_144];
const policy = parsePolicy({
  version: "p",
  channels: ["a"],
  segments: [],
  default: { name: "rest", caps: { a: [{ window: "30d", max: 1000 }] } },
});

function callOf(namespace: string, campaignId: string, at: number, users = USERS, rules = policy) {
  const [call] = planCapSends({
    namespace,
    now: at,
    at,
    mode: "count",
    channel: "a",
    campaignId,
    forced: false,
    horizonMs: keptHorizonMs(rules, REDELIVERY_MS),
    profiles: scriptProfiles(rules, "a", REDELIVERY_MS),
    sortedIds: Uint32Array.from(users),
    segmentOf: new Uint8Array(users.length),
  });
  if (!call) throw new Error("no call planned");
  return call;
}
async function codesOf(
  namespace: string,
  campaignId: string,
  at: number,
  users = USERS,
  rules = policy,
): Promise<number[]> {
  const call = callOf(namespace, campaignId, at, users, rules);
  expect(call.keys).toEqual([capIdentityKey(namespace, 0)]);
  return [...readCapSendsReply(await store.capSends(call.keys, call.args), users.length).codes];
}

describe("a sparse call", () => {
  it("moves users whose record outgrows the blob to the range's hash, and still counts and recognises their sends", async () => {
    const namespace = uniqueNamespace();
    // a send costs a record 7 bytes: past 512 bytes after about 73 of them
    for (let c = 0; c < 90; c++) {
      expect(await codesOf(namespace, `c${c}`, T0 + c * 1000)).toEqual([REPLY_ALLOWED, REPLY_ALLOWED]);
    }
    const fields = await cluster.hkeys(capRecordKey(namespace, 0, 0));
    expect(fields.sort()).toEqual(USERS.map(String).sort());
    // campaigns sent while the users were in the blob and after they moved
    expect(await codesOf(namespace, "c5", T0 + 95_000)).toEqual([REPLY_DUPLICATE, REPLY_DUPLICATE]);
    expect(await codesOf(namespace, "c89", T0 + 96_000)).toEqual([REPLY_DUPLICATE, REPLY_DUPLICATE]);
    expect(await codesOf(namespace, "c90", T0 + 97_000)).toEqual([REPLY_ALLOWED, REPLY_ALLOWED]);
  });

  it("refuses a profile the call does not carry, and writes nothing", async () => {
    const namespace = uniqueNamespace();
    const call = callOf(namespace, "c", T0);
    // the range's users: byte 2 is 2, then the 2 users' IDs (4 bytes each), then their profiles
    const withProfiles = (args: (string | Buffer)[], first: number, second: number) => {
      const users = Buffer.from(args[11] as Buffer);
      expect(users.length).toBe(12);
      users[10] = first;
      users[11] = second;
      return [...args.slice(0, 11), users];
    };
    await expect(store.capSends(call.keys, withProfiles(call.args, 3, 0))).rejects.toThrow(/unknown profile 3/);
    await expect(store.capSends(call.keys, withProfiles(call.args, 0, 3))).rejects.toThrow(/unknown profile 3/);
    await expect(store.capSends(call.keys, withProfiles(call.args, 3, 3))).rejects.toThrow(/unknown profile 3/);
    expect(await cluster.exists(capBlobKey(namespace, 0, 0))).toBe(0);
    // the same call with the profile it carries: both users new to an empty blob
    expect(await codesOf(namespace, "c", T0)).toEqual([REPLY_ALLOWED, REPLY_ALLOWED]);
    // the second user with a profile the call does not carry, the first user's send already counted
    const again = callOf(namespace, "d", T0 + 1000);
    const changed = withProfiles(again.args, 0, 3);
    const before = await cluster.getBuffer(capBlobKey(namespace, 0, 0));
    await expect(store.capSends(again.keys, changed)).rejects.toThrow(/unknown profile 3/);
    expect(await cluster.getBuffer(capBlobKey(namespace, 0, 0))).toEqual(before);
    expect(await cluster.exists(capIdentityKey(namespace, 0))).toBe(1);
  });

  const onePerDay = parsePolicy({
    version: "p",
    channels: ["a"],
    segments: [],
    default: { name: "rest", caps: { a: [{ window: "1d", max: 1 }] } },
  });
  // a whole page of tag 0 (page 1: IDs 256..511) written through its block, marked in the identity table
  const pageOne = Array.from({ length: 256 }, (_, i) => 256 + i);
  const toBlock = async (namespace: string) => {
    expect(await codesOf(namespace, "dense", T0, pageOne, onePerDay)).toEqual(pageOne.map(() => REPLY_ALLOWED));
    expect(await cluster.hget(capIdentityKey(namespace, 0), "p:1")).not.toBeNull();
  };
  // users of tag 0 on pages of their own: before page 1, on it, after it (ranges 0 and 1)
  const sparse = [3, 300, 262_144, 2 ** 29 + 5];
  const capped = [REPLY_ALLOWED, REPLY_FIRST_CAP, REPLY_ALLOWED, REPLY_ALLOWED];
  // the same campaign again: the counted sends are duplicates, the capped one still capped
  const again = [REPLY_DUPLICATE, REPLY_FIRST_CAP, REPLY_DUPLICATE, REPLY_DUPLICATE];

  it("reads the block of a page that has one, its marker listed with the identity table's few fields", async () => {
    const namespace = uniqueNamespace();
    await toBlock(namespace);
    // pages without a block beside the marked one: decided on the sparse path
    const unmarked = [3, 262_144, 2 ** 29 + 5];
    expect(await codesOf(namespace, "other", T0 + 1000, unmarked, onePerDay)).toEqual(
      unmarked.map(() => REPLY_ALLOWED),
    );
    expect(await codesOf(namespace, "sparse", T0 + 2000, sparse, onePerDay)).toEqual([
      REPLY_FIRST_CAP,
      REPLY_FIRST_CAP,
      REPLY_FIRST_CAP,
      REPLY_FIRST_CAP,
    ]);
    // with a listpack table, and with a hash table (an identity past 64 bytes), which HSCAN lists by cursor
    for (const longId of [false, true]) {
      const fresh = uniqueNamespace();
      await toBlock(fresh);
      if (longId) {
        expect(await codesOf(fresh, "x".repeat(80), T0 + 1000, [2 ** 30], policy)).toEqual([REPLY_ALLOWED]);
      }
      const encoding = await cluster.object("ENCODING", capIdentityKey(fresh, 0));
      expect(encoding).toBe(longId ? "hashtable" : "listpack");
      expect(await codesOf(fresh, "sparse", T0 + 2000, sparse, onePerDay)).toEqual(capped);
      expect(await codesOf(fresh, "sparse", T0 + 3000, sparse, onePerDay)).toEqual(again);
    }
  });

  it("reads the block of a page that has one, its marker looked up by page in an identity table of many fields", async () => {
    const namespace = uniqueNamespace();
    await toBlock(namespace);
    // campaigns to a user of the tag in another range: 3 fields each (identity, number, last use)
    for (let c = 0; c < 30; c++) {
      expect(await codesOf(namespace, `c${c}`, T0 + c, [2 ** 30], policy)).toEqual([REPLY_ALLOWED]);
    }
    expect(await cluster.hlen(capIdentityKey(namespace, 0))).toBeGreaterThan(16 * sparse.length);
    expect(await codesOf(namespace, "sparse", T0 + 2000, sparse, onePerDay)).toEqual(capped);
    expect(await codesOf(namespace, "sparse", T0 + 3000, sparse, onePerDay)).toEqual(again);
  });
});

// A call whose pages all take the user records carries each range's users in one argument (their IDs as the
// range's blob holds them, then their profiles); a call of block-path pages or a check carries page arguments.
// Both formats must decide alike: the same calls run as planned in one namespace and with their ranges' users
// made page arguments (asPageArgs(), the general path's format) in another, against the model.
describe("a call of ranges' users", () => {
  it("decides as the same users sent as page arguments and as the model does (random IDs of one tag in every range, sparse and dense)", async () => {
    const stepArbitrary = fc.record({
      pick: fc.array(fc.nat(), { minLength: 1, maxLength: 30 }),
      dense: fc.constantFrom(false, false, false, true),
      elapsed: fc.integer({ min: 0, max: 90_000 }),
      mode: fc.constantFrom<"count" | "peek">("count", "count", "count", "peek"),
      channel: fc.constantFrom(...POLICY_CHANNELS),
      campaignId: fc.constantFrom("", "c1", "c2", "c3"),
    });
    await fc.assert(
      fc.asyncProperty(
        policyArbitrary,
        fc.integer({ min: 0, max: 255 }),
        // IDs of the tag: bits 10..17 are the tag, the rest random (all 8 ranges of 2^29 IDs)
        fc.array(fc.tuple(fc.integer({ min: 0, max: 2 ** 14 - 1 }), fc.integer({ min: 0, max: 1023 })), {
          minLength: 1,
          maxLength: 40,
        }),
        fc.array(stepArbitrary, { minLength: 2, maxLength: 10 }),
        async (rules, tag, parts, steps) => {
          const pool = [...new Set(parts.map(([high, low]) => ((high * 256 + tag) * 1024 + low) >>> 0))];
          // a page of the tag reached densely (16 users or more: its block)
          const densePage = Array.from({ length: 20 }, (_, i) => (tag * 4 + 1) * 256 + 7 * i);
          const segmentOf = (user: number) => user % rules.segments.length;
          const model = new CappingModel(rules, segmentOf, REDELIVERY_MS);
          const [byRange, byPage] = [uniqueNamespace(), uniqueNamespace()];
          let now = T0;
          for (const step of steps) {
            now += step.elapsed;
            const picked = step.pick.map((k) => pool[k % pool.length] as number);
            const users = [...new Set([...picked, ...(step.dense ? densePage : [])])].sort((a, b) => a - b);
            const call = { ...step, now, at: now, exemptCounted: false, users };
            const want = model.apply(call);
            for (const [namespace, pageArgs] of [
              [byRange, false],
              [byPage, true],
            ] as const) {
              const calls = planCapSends({
                namespace,
                now,
                at: now,
                mode: step.mode,
                channel: step.channel,
                campaignId: step.campaignId,
                forced: false,
                horizonMs: keptHorizonMs(rules, REDELIVERY_MS),
                profiles: scriptProfiles(rules, step.channel, REDELIVERY_MS),
                sortedIds: Uint32Array.from(users),
                segmentOf: Uint8Array.from(users, segmentOf),
              });
              const got = new Map<number, ModelDecision>();
              for (const planned of calls) {
                const args = pageArgs ? asPageArgs(planned.args) : planned.args;
                const { codes } = readCapSendsReply(await store.capSends(planned.keys, args), planned.members.length);
                for (const [m, member] of planned.members.entries()) {
                  got.set(users[member] as number, decisionOf(codes[m] as number));
                }
              }
              expect(
                users.map((user) => got.get(user)),
                JSON.stringify({ pageArgs, users }),
              ).toEqual(want);
            }
          }
        },
      ),
      { numRuns: 60 },
    );
  });
});
