// lua/cap-sends.lua's whole-call sparse path (every page a record-path page, each range's users new to an
// empty blob or a run of its users) where it hands a call to the general path: a busy user's record
// outgrowing the blob, a profile the call does not carry, a page with a block (its marker found by listing the
// identity table's markers, or by page in a table of many fields).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import {
  planCapSends,
  REPLY_ALLOWED,
  REPLY_DUPLICATE,
  REPLY_FIRST_CAP,
  readCapSendsReply,
  scriptProfiles,
} from "../../functions/core/capping/cap-sends-script.ts";
import { keptHorizonMs, parsePolicy } from "../../functions/core/capping/policy.ts";
import { capBlobKey, capIdentityKey, capRecordKey } from "../../functions/core/shared/keys.ts";
import { connectCluster, uniqueNamespace } from "../support/cluster.ts";
import { T0 } from "../support/rules.ts";

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
    const args = [...call.args];
    const spec = Buffer.from(args[11] as Buffer);
    spec[6] = 3;
    args[11] = spec;
    await expect(store.capSends(call.keys, args)).rejects.toThrow(/unknown profile 3/);
    const spec2 = Buffer.from(args[12] as Buffer);
    spec2[6] = 3;
    args[12] = spec2;
    await expect(store.capSends(call.keys, args)).rejects.toThrow(/unknown profile 3/);
    expect(await cluster.exists(capBlobKey(namespace, 0, 0))).toBe(0);
    // the same call with the profile it carries: both users new to an empty blob
    expect(await codesOf(namespace, "c", T0)).toEqual([REPLY_ALLOWED, REPLY_ALLOWED]);
    // the second user with a profile the call does not carry, the first user's send already counted
    const again = callOf(namespace, "d", T0 + 1000);
    const changed = [...again.args];
    const second = Buffer.from(changed[12] as Buffer);
    second[6] = 3;
    changed[12] = second;
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
