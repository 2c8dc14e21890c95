// The packed range arguments of a sparse call (one argument per record range: byte 1 the range
// index, byte 2 = 2, the users' IDs 4 bytes big endian ascending, then a profile byte each). Hostile but valid
// calls and malformed arguments against the contract: the model's decisions, malformed arguments refused
// before anything is written. (Defect: IDs out of order, repeated or of another range, and mixed formats, were
// not refused.)
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
import { keptHorizonMs, type Policy, parsePolicy } from "../../../functions/core/capping/policy.ts";
import { capBlobKey, capIdentityKey, capRecordKey } from "../../../sdk/src/protocol/index.ts";
import { asPageArgs, type CapSendsCall, idOf, previousScript, REDELIVERY_MS } from "../../support/cap-sends-runner.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
let store: RedisCapStore;
let previous: CapSendsCall;
beforeAll(() => {
  cluster = connectCluster();
  store = new RedisCapStore(cluster);
  previous = previousScript(cluster, "capSendsPreviousRev12");
});
afterAll(async () => {
  await cluster.quit();
});

const onePerDay = parsePolicy({
  version: "p",
  channels: ["a"],
  segments: [],
  default: { name: "rest", caps: { a: [{ window: "1d", max: 1 }] } },
});
const CAPPED = REPLY_FIRST_CAP;
// users of tag 0: two of range 0 on pages of their own, one of range 1 (2^29)
const A = 300;
const B = 262_144;
const R1 = 2 ** 29;

function callOf(namespace: string, campaignId: string, at: number, users: number[], rules: Policy = onePerDay) {
  const sortedIds = Uint32Array.from(users).sort();
  const calls = planCapSends({
    namespace,
    now: at,
    at,
    mode: "count",
    channel: "a",
    campaignId,
    forced: false,
    horizonMs: keptHorizonMs(rules, REDELIVERY_MS),
    profiles: scriptProfiles(rules, "a", REDELIVERY_MS),
    sortedIds,
    segmentOf: new Uint8Array(users.length),
  });
  expect(calls).toHaveLength(1);
  return calls[0] as NonNullable<(typeof calls)[0]>;
}
async function codesOf(namespace: string, campaignId: string, at: number, users: number[]): Promise<number[]> {
  const call = callOf(namespace, campaignId, at, users);
  return [...readCapSendsReply(await store.capSends(call.keys, call.args), call.members.length).codes];
}
/** A range argument of index `index` holding `ids` in that order with profile bytes `profiles` (default 0). */
function rangeArg(index: number, ids: number[], profiles: number[] = ids.map(() => 0)): Buffer {
  const arg = Buffer.alloc(2 + 5 * ids.length);
  arg[0] = index;
  arg[1] = 2;
  ids.forEach((id, i) => {
    arg.writeUInt32BE(id, 2 + 4 * i);
    arg[2 + 4 * ids.length + i] = profiles[i] as number;
  });
  return arg;
}
/** Every key of the namespace's tag-0 records, as they are (to show nothing was written). */
async function snapshot(namespace: string): Promise<(Buffer | null)[]> {
  return Promise.all(
    [capBlobKey(namespace, 0, 0), capBlobKey(namespace, 0, 1), capIdentityKey(namespace, 0)].map(async (key) =>
      (await cluster.type(key)) === "string" ? cluster.getBuffer(key) : Buffer.from(String(await cluster.exists(key))),
    ),
  );
}

describe("packed range arguments: malformed", () => {
  it("refuses a range's IDs out of order (new blob), writing nothing", async () => {
    const namespace = uniqueNamespace();
    const call = callOf(namespace, "c", T0, [A, B]);
    const args = [...call.args.slice(0, 11), rangeArg(1, [B, A])];
    await expect(store.capSends(call.keys, args)).rejects.toThrow(/ERR/);
    expect(await cluster.exists(capBlobKey(namespace, 0, 0))).toBe(0);
  });

  it("after a range's IDs out of order were refused, the same users in order are sent, then capped", async () => {
    const namespace = uniqueNamespace();
    const call = callOf(namespace, "c", T0, [A, B]);
    await expect(store.capSends(call.keys, [...call.args.slice(0, 11), rangeArg(1, [B, A])])).rejects.toThrow(
      /not ascending, unique and of range 0/,
    );
    expect(await codesOf(namespace, "c", T0, [A, B])).toEqual([REPLY_ALLOWED, REPLY_ALLOWED]);
    // a second campaign an hour later: each user has had 1 send in the day, max 1; a third user joins the blob
    expect(await codesOf(namespace, "d", T0 + 3_600_000, [A, 512, B])).toEqual([CAPPED, REPLY_ALLOWED, CAPPED]);
  });

  it("refuses a user repeated in a range (new blob), writing nothing", async () => {
    const namespace = uniqueNamespace();
    const call = callOf(namespace, "c", T0, [A]);
    const args = [...call.args.slice(0, 11), rangeArg(1, [A, A])];
    await expect(store.capSends(call.keys, args)).rejects.toThrow(/ERR/);
    expect(await cluster.exists(capBlobKey(namespace, 0, 0))).toBe(0);
  });

  it("refuses a user of another record range in a range's argument (new blobs), writing nothing", async () => {
    const namespace = uniqueNamespace();
    const call = callOf(namespace, "c", T0, [A, R1]);
    expect(call.args).toHaveLength(13);
    // range 1 (index 1: IDs below 2^29) given R1, range 2 given A
    const args = [...call.args.slice(0, 11), rangeArg(1, [R1]), rangeArg(2, [A])];
    await expect(store.capSends(call.keys, args)).rejects.toThrow(/ERR/);
    expect(await snapshot(namespace)).toEqual([Buffer.from("0"), Buffer.from("0"), Buffer.from("0")]);
  });

  it("after users in the wrong range were refused, the same users in theirs are sent, then capped", async () => {
    const namespace = uniqueNamespace();
    const call = callOf(namespace, "c", T0, [A, R1]);
    const args = [...call.args.slice(0, 11), rangeArg(1, [R1]), rangeArg(2, [A])];
    await expect(store.capSends(call.keys, args)).rejects.toThrow(/not ascending, unique and of range/);
    expect(await codesOf(namespace, "c", T0, [A, R1])).toEqual([REPLY_ALLOWED, REPLY_ALLOWED]);
    expect(await codesOf(namespace, "d", T0 + 3_600_000, [A, R1])).toEqual([CAPPED, CAPPED]);
  });

  it("a range's IDs out of order, which would hide a page with a block, are refused: its user already sent stays capped", async () => {
    const namespace = uniqueNamespace();
    // page 1 (IDs 256..511, tag 0) written through its block: every user sent once today (max 1)
    const pageOne = Array.from({ length: 256 }, (_, i) => 256 + i);
    expect(await codesOf(namespace, "dense", T0, pageOne)).toEqual(pageOne.map(() => REPLY_ALLOWED));
    expect(await cluster.hget(capIdentityKey(namespace, 0), "p:1")).not.toBeNull();
    // users of tag 0 on pages 1024, 2048 and 1 (300, on the block's page), sent out of order: the binary
    // search for the marked page 1 over the unsorted IDs misses it
    const users = [262_149, 524_293, 300];
    const call = callOf(namespace, "c", T0 + 1000, users);
    await expect(store.capSends(call.keys, [...call.args.slice(0, 11), rangeArg(1, users)])).rejects.toThrow(
      /not ascending/,
    );
    expect(await cluster.exists(capBlobKey(namespace, 0, 0))).toBe(0);
    // the same users in order: 300 capped (its send of "dense" today), the others new
    expect(await codesOf(namespace, "d", T0 + 2000, users)).toEqual([CAPPED, REPLY_ALLOWED, REPLY_ALLOWED]);
  });

  it("refuses a page argument followed by a range argument (formats mixed), writing nothing", async () => {
    const namespace = uniqueNamespace();
    const call = callOf(namespace, "c", T0, [A, R1]);
    const pageArgs = asPageArgs(call.args);
    const args = [...pageArgs.slice(0, 12), rangeArg(2, [R1])];
    const before = await snapshot(namespace);
    await expect(store.capSends(call.keys, args)).rejects.toThrow(/ERR/);
    expect(await snapshot(namespace)).toEqual(before);
  });

  it("refuses a page argument of another range's index, of no users, or a byte short, writing nothing", async () => {
    const namespace = uniqueNamespace();
    const call = callOf(namespace, "c", T0, [A, R1]);
    const pageArgs = asPageArgs(call.args);
    const pageOfA = pageArgs[11] as Buffer;
    const otherRange = Buffer.from(pageOfA);
    otherRange[0] = 2; // the index of R1's range (1); A is of range 0
    const bad: (string | Buffer)[][] = [
      [...pageArgs.slice(0, 11), otherRange, pageArgs[12] as Buffer],
      [...pageArgs.slice(0, 11), pageOfA.subarray(0, 5), pageArgs[12] as Buffer],
      [...pageArgs.slice(0, 11), pageOfA.subarray(0, pageOfA.length - 1), pageArgs[12] as Buffer],
    ];
    for (const args of bad)
      await expect(store.capSends(call.keys, args)).rejects.toThrow(/is not a page of users of range/);
    expect(await snapshot(namespace)).toEqual([Buffer.from("0"), Buffer.from("0"), Buffer.from("0")]);
    expect(await codesOf(namespace, "c", T0, [A, R1])).toEqual([REPLY_ALLOWED, REPLY_ALLOWED]);
  });

  it("refuses a range argument followed by a page argument, one whose length is not 2 + 5 per user, a wrong index, too many", async () => {
    const namespace = uniqueNamespace();
    const call = callOf(namespace, "c", T0, [A, R1]);
    const pageArgs = asPageArgs(call.args);
    const bad: (string | Buffer)[][] = [
      [...call.args.slice(0, 12), pageArgs[12] as Buffer],
      [...call.args.slice(0, 11), Buffer.concat([call.args[11] as Buffer, Buffer.from([0])]), call.args[12] as Buffer],
      [...call.args.slice(0, 11), Buffer.from((call.args[11] as Buffer).subarray(0, 6)), call.args[12] as Buffer],
      [...call.args.slice(0, 11), call.args[12] as Buffer, call.args[11] as Buffer],
      [...call.args, rangeArg(3, [])],
      [...call.args.slice(0, 12)],
    ];
    for (const args of bad) await expect(store.capSends(call.keys, args)).rejects.toThrow(/ERR/);
    expect(await snapshot(namespace)).toEqual([Buffer.from("0"), Buffer.from("0"), Buffer.from("0")]);
    expect(await codesOf(namespace, "c", T0, [A, R1])).toEqual([REPLY_ALLOWED, REPLY_ALLOWED]);
  });

  it("refuses a user of another tag, or a profile out of range, in a new blob and in a run of its users", async () => {
    const namespace = uniqueNamespace();
    const call = callOf(namespace, "c", T0, [A, B]);
    // 1024: tag 1
    await expect(store.capSends(call.keys, [...call.args.slice(0, 11), rangeArg(1, [A, 1024])])).rejects.toThrow(
      /not of the tag/,
    );
    await expect(store.capSends(call.keys, [...call.args.slice(0, 11), rangeArg(1, [A, B], [0, 255])])).rejects.toThrow(
      /unknown profile/,
    );
    expect(await cluster.exists(capBlobKey(namespace, 0, 0))).toBe(0);
    expect(await codesOf(namespace, "c", T0, [A, B])).toEqual([REPLY_ALLOWED, REPLY_ALLOWED]);
    const again = callOf(namespace, "d", T0 + 1000, [A, B]);
    const before = await cluster.getBuffer(capBlobKey(namespace, 0, 0));
    await expect(
      store.capSends(again.keys, [...again.args.slice(0, 11), rangeArg(1, [A, B], [0, 200])]),
    ).rejects.toThrow(/unknown profile/);
    expect(await cluster.getBuffer(capBlobKey(namespace, 0, 0))).toEqual(before);
  });
});

describe("packed range arguments: malformed at random", () => {
  // users of tag 0 (bits 10..17 of the ID zero): k * 2^18 + j, j < 1024; range 0 for k < 2048, range 1 above
  const userOfTag = fc.tuple(fc.integer({ min: 0, max: 4095 }), fc.integer({ min: 0, max: 1023 }));
  const mutation = fc.constantFrom("none", "swap", "repeat", "other range");
  it("a section is refused, writing nothing, exactly when its IDs do not ascend strictly or leave its range", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(userOfTag, { minLength: 2, maxLength: 24, selector: ([k, j]) => k * 262_144 + j }),
        mutation,
        fc.nat(),
        async (pairs, change, pick) => {
          const users = pairs.map(([k, j]) => k * 262_144 + j).sort((x, y) => x - y);
          const namespace = uniqueNamespace();
          const call = callOf(namespace, "c", T0, users);
          const sections = [0, 1].map((range) => users.filter((id) => Math.floor(id / 2 ** 29) === range));
          const present = sections.filter((ids) => ids.length > 0);
          const target = present[pick % present.length] as number[];
          const other = present.find((ids) => ids !== target);
          let mutated = false;
          if (change === "swap" && target.length >= 2) {
            const i = pick % (target.length - 1);
            [target[i], target[i + 1]] = [target[i + 1] as number, target[i] as number];
            mutated = true;
          } else if (change === "repeat" && target.length >= 2) {
            const i = pick % (target.length - 1);
            target[i + 1] = target[i] as number;
            mutated = true;
          } else if (change === "other range" && other) {
            // the first of the other range's users, last in this one's (still ascending when this is range 0)
            target.push(other[0] as number);
            mutated = true;
          }
          const args = [...call.args.slice(0, 11), ...present.map((ids, r) => rangeArg(r + 1, ids))];
          const before = await snapshot(namespace);
          const reply = store.capSends(call.keys, args);
          if (mutated) {
            await expect(reply).rejects.toThrow(/not ascending, unique and of range/);
            expect(await snapshot(namespace)).toEqual(before);
          } else {
            const count = present.reduce((sum, ids) => sum + ids.length, 0);
            expect([...readCapSendsReply(await reply, count).codes]).toEqual(users.map(() => REPLY_ALLOWED));
          }
        },
      ),
      { numRuns: 40 },
    );
  });
});

describe("packed range arguments: malformed, against blobs that hold the users", () => {
  const threePerDay = parsePolicy({
    version: "p",
    channels: ["a"],
    segments: [],
    default: { name: "rest", caps: { a: [{ window: "1d", max: 3 }] } },
  });
  const send = async (namespace: string, campaignId: string, at: number, users: number[], arg?: Buffer) => {
    const call = callOf(namespace, campaignId, at, users, threePerDay);
    const args = arg ? [...call.args.slice(0, 11), arg] : call.args;
    const reply = await store.capSends(call.keys, args);
    return [...readCapSendsReply(reply, arg ? (arg.length - 2) / 5 : users.length).codes];
  };

  it("a repeated user or users out of order, in a blob holding them (the general path's call), are refused and change nothing", async () => {
    // repeated, the blob holding A and B
    let namespace = uniqueNamespace();
    expect(await send(namespace, "c", T0, [A, B])).toEqual([REPLY_ALLOWED, REPLY_ALLOWED]);
    let before = await cluster.getBuffer(capBlobKey(namespace, 0, 0));
    await expect(send(namespace, "d", T0 + 1000, [A], rangeArg(1, [A, A]))).rejects.toThrow(/not ascending, unique/);
    expect(await cluster.getBuffer(capBlobKey(namespace, 0, 0))).toEqual(before);
    // A: c, e, f (max 3)
    expect(await send(namespace, "e", T0 + 2000, [A, B])).toEqual([REPLY_ALLOWED, REPLY_ALLOWED]);
    expect(await send(namespace, "f", T0 + 3000, [A, B])).toEqual([REPLY_ALLOWED, REPLY_ALLOWED]);
    expect(await send(namespace, "g", T0 + 4000, [A, B])).toEqual([CAPPED, CAPPED]);
    // out of order, all in the blob
    namespace = uniqueNamespace();
    const users = [A, 700, B];
    expect(await send(namespace, "c", T0, users)).toEqual(users.map(() => REPLY_ALLOWED));
    before = await cluster.getBuffer(capBlobKey(namespace, 0, 0));
    await expect(send(namespace, "d", T0 + 1000, users, rangeArg(1, [B, 700, A]))).rejects.toThrow(/not ascending/);
    expect(await cluster.getBuffer(capBlobKey(namespace, 0, 0))).toEqual(before);
  });

  it("a range argument of no users beside one of users decides the users it holds", async () => {
    const namespace = uniqueNamespace();
    // (one range argument for a call of two ranges: refused)
    await expect(send(namespace, "c", T0, [A, R1], rangeArg(1, [A]))).rejects.toThrow(/1 arguments of users for 2/);
    const call = callOf(namespace, "d", T0 + 1000, [A, R1], threePerDay);
    const reply = await store.capSends(call.keys, [...call.args.slice(0, 11), rangeArg(1, [A]), rangeArg(2, [])]);
    expect([...readCapSendsReply(reply, 1).codes]).toEqual([REPLY_ALLOWED]);
    expect(await send(namespace, "e", T0 + 2000, [A, R1])).toEqual([REPLY_ALLOWED, REPLY_ALLOWED]);
    // A: d, e, f (max 3); R1: e, f, g
    expect(await send(namespace, "f", T0 + 3000, [A, R1])).toEqual([REPLY_ALLOWED, REPLY_ALLOWED]);
    expect(await send(namespace, "g", T0 + 4000, [A, R1])).toEqual([CAPPED, REPLY_ALLOWED]);
    expect(await send(namespace, "h", T0 + 5000, [A, R1])).toEqual([CAPPED, CAPPED]);
  });
});

describe("packed range arguments: hostile but valid", () => {
  it("IDs whose bytes are NUL, '%', pattern characters and the range edges decide as the model (sent, then capped, then a redelivery duplicate)", async () => {
    // tag 9: byte 3 in 36..39 ('$' '%' '&' '''), byte 2 any of 4k+0; tag 23: byte 3 92..95 ('\\' ']' '^' '_');
    // tag 11: '-' (45); tag 255: 2^31-1; tag 0: 0 and range 1's first ID
    const special = [0, 0x25, 0x5d, 0x5e, 0x2d, 0x28, 0x5b, 0x2e, 0x24, 0x3f, 0x7f, 0xff];
    const candidates = new Set<number>([0, 1, 2 ** 29 - 1, 2 ** 29, 2 ** 30 - 1, 2 ** 30, 2 ** 31 - 1]);
    for (const s of special) {
      for (const t of special) {
        candidates.add(idOf(s & 0x7f, s, t, s));
        candidates.add(idOf(0, t, s, 0));
        candidates.add(idOf(t & 0x7f, 0, s, t));
      }
    }
    const byTag = new Map<number, number[]>();
    for (const id of candidates) {
      const tag = (id >>> 10) & 255;
      byTag.set(tag, [...(byTag.get(tag) ?? []), id]);
    }
    const groups = [...byTag.values()].filter((users) => users.length >= 2);
    expect(groups.length).toBeGreaterThan(5);
    for (const users of groups) {
      const namespace = uniqueNamespace();
      const sorted = [...users].sort((x, y) => x - y);
      expect(await codesOf(namespace, "c", T0, sorted)).toEqual(sorted.map(() => REPLY_ALLOWED));
      expect(await codesOf(namespace, "c", T0 + 1000, sorted)).toEqual(sorted.map(() => REPLY_DUPLICATE));
      expect(await codesOf(namespace, "d", T0 + 2000, sorted)).toEqual(sorted.map(() => CAPPED));
      // a superset: the new user allowed, the others capped; a subset: capped
      // another user of the tag: the first one's ID with its low 10 bits changed
      const first = sorted[0] as number;
      const extra = first % 1024 === 1023 ? first - 1 : first + 1;
      if (!sorted.includes(extra)) {
        const superset = [...sorted, extra].sort((x, y) => x - y);
        expect(await codesOf(namespace, "e", T0 + 3000, superset)).toEqual(
          superset.map((u) => (u === extra ? REPLY_ALLOWED : CAPPED)),
        );
      }
      expect(await codesOf(namespace, "f", T0 + 4000, sorted.slice(1))).toEqual(sorted.slice(1).map(() => CAPPED));
    }
  });

  it("a dense page with sparse users in one call (page arguments), then the sparse users alone (range arguments), a superset and a subset", async () => {
    const namespace = uniqueNamespace();
    const dense = Array.from({ length: 20 }, (_, i) => 256 + 7 * i);
    const sparse = [0, 3, 262_144, R1, 2 ** 32 - 1024 * 1024];
    const mixed = [...dense, ...sparse].sort((x, y) => x - y);
    const first = callOf(namespace, "c", T0, mixed);
    expect((first.args[11] as Buffer)[1]).not.toBe(2);
    expect(await codesOf(namespace, "c", T0, mixed)).toEqual(mixed.map(() => REPLY_ALLOWED));
    const alone = callOf(namespace, "d", T0 + 1000, sparse);
    expect((alone.args[11] as Buffer)[1]).toBe(2);
    expect(await codesOf(namespace, "d", T0 + 1000, sparse)).toEqual(sparse.map(() => CAPPED));
    expect(await codesOf(namespace, "c", T0 + 2000, sparse)).toEqual(sparse.map(() => REPLY_DUPLICATE));
    const superset = [...sparse, 1, 263_000, R1 + 1].sort((x, y) => x - y);
    const fresh = new Set([1, 263_000, R1 + 1]);
    expect(await codesOf(namespace, "e", T0 + 3000, superset)).toEqual(
      superset.map((u) => (fresh.has(u) ? REPLY_ALLOWED : CAPPED)),
    );
    expect(await codesOf(namespace, "e", T0 + 4000, superset.slice(2))).toEqual(
      superset.slice(2).map((u) => (fresh.has(u) ? REPLY_DUPLICATE : CAPPED)),
    );
    // a day later: the dense page's users and the sparse ones, each allowed once more
    expect(await codesOf(namespace, "f", T0 + 86_400_000 + 5000, mixed)).toEqual(mixed.map(() => REPLY_ALLOWED));
  });

  it("the same users in two calls at once, and the previous script alternating with the new one, count each send once", async () => {
    const namespace = uniqueNamespace();
    const users = [A, 700, B, R1];
    const one = callOf(namespace, "c", T0, users);
    const two = callOf(namespace, "c", T0, users);
    const replies = await Promise.all([store.capSends(one.keys, one.args), store.capSends(two.keys, two.args)]);
    const codes = replies.map((reply) => [...readCapSendsReply(reply, users.length).codes].sort());
    expect(codes.flat().sort()).toEqual([...users.map(() => REPLY_ALLOWED), ...users.map(() => REPLY_DUPLICATE)]);
    // a different campaign at once: one is allowed per user, the other capped
    const three = callOf(namespace, "d", T0 + 86_400_000, users);
    const four = callOf(namespace, "e", T0 + 86_400_000, users);
    const both = await Promise.all([
      store.capSends(three.keys, three.args),
      previous(four.keys, asPageArgs(four.args)),
    ]);
    const perUser = users.map((_, i) => both.map((reply) => readCapSendsReply(reply, users.length).codes[i]).sort());
    for (const pair of perUser) expect(pair).toEqual([REPLY_ALLOWED, CAPPED]);
    // redeliveries through either script: duplicates
    const d2 = callOf(namespace, "d", T0 + 86_400_000 + 1000, users);
    const dFirst = [...readCapSendsReply(both[0] as Buffer, 4).codes];
    expect([...readCapSendsReply(await previous(d2.keys, asPageArgs(d2.args)), 4).codes]).toEqual(
      dFirst.map((code) => (code === REPLY_ALLOWED ? REPLY_DUPLICATE : CAPPED)),
    );
    // (each user's allowed one of d and e comes back duplicate, its capped one capped again)
    const e2 = callOf(namespace, "e", T0 + 86_400_000 + 2000, users);
    const eFirst = [...readCapSendsReply(both[1] as Buffer, 4).codes];
    expect([...readCapSendsReply(await store.capSends(e2.keys, e2.args), 4).codes]).toEqual(
      eFirst.map((code) => (code === REPLY_ALLOWED ? REPLY_DUPLICATE : CAPPED)),
    );
    expect(await cluster.exists(capRecordKey(namespace, 0, 0))).toBe(0);
  });
});
