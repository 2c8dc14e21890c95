// lua/cap-sends.lua's whole-call sparse path (every page a record-path page, each range's users new to an
// empty blob or a run of its users) where it hands a call to the general path: a busy user's record
// outgrowing the blob, a profile the call does not carry.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import {
  planCapSends,
  REPLY_ALLOWED,
  REPLY_DUPLICATE,
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

function callOf(namespace: string, campaignId: string, at: number) {
  const [call] = planCapSends({
    namespace,
    now: at,
    at,
    mode: "count",
    channel: "a",
    campaignId,
    forced: false,
    horizonMs: keptHorizonMs(policy, REDELIVERY_MS),
    profiles: scriptProfiles(policy, "a", REDELIVERY_MS),
    sortedIds: Uint32Array.from(USERS),
    segmentOf: new Uint8Array(USERS.length),
  });
  if (!call) throw new Error("no call planned");
  return call;
}
async function codesOf(namespace: string, campaignId: string, at: number): Promise<number[]> {
  const call = callOf(namespace, campaignId, at);
  return [...readCapSendsReply(await store.capSends(call.keys, call.args), USERS.length).codes];
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
});
