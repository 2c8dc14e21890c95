// lua/cap-sends/ as a Redis Function (sdk/src/protocol/redis-functions.ts) on the real cluster: routed by
// its first key on every shard, loaded again where a node lost it, a failed load reported as its reply, and
// no state of one call reaching the next (FCALL against the same chunk run whole by EVAL per call).
import fc from "fast-check";
import { Cluster, Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { load } from "../../../functions/adapters/lua-scripts.ts";
import { RedisCapStore, redisCallsOf, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import type { CapStore } from "../../../functions/core/capping/cap-sends-script.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { StoreReplyError } from "../../../functions/core/shared/errors.ts";
import { waitForCluster } from "../../../scripts/redis-cluster.ts";
import {
  capIdentityKey,
  defineLibrary,
  evalScriptOf,
  fcallBuffer,
  loadLibrary,
  type RedisFunctionLibrary,
} from "../../../sdk/src/protocol/index.ts";
import { basePort, clusterPorts, connectCluster, primariesOf, uniqueNamespace } from "../../support/cluster.ts";
import { DAY, rulesOf, simplePolicy, T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
let nodes: Redis[];
beforeAll(() => {
  cluster = connectCluster();
  nodes = clusterPorts.map((port) => new Redis({ host: "127.0.0.1", port }));
});
afterAll(async () => {
  for (const node of nodes) node.disconnect();
  await cluster.quit();
});

/** A library of one function returning its first key, as a test's own version. */
const echoLibrary = (version: string) =>
  defineLibrary({ echo: `-- ${version}\nreturn function(keys, args) return keys[1] end` });

const holds = async (node: Redis, library: RedisFunctionLibrary) =>
  ((await node.function("LIST", "LIBRARYNAME", library.name)) as unknown[]).length > 0;

/** A key of cap-sends' layout in each slot group that `primary` serves, for tags 0..255. */
async function keysByPrimary(namespace: string) {
  const primaries = await primariesOf(nodes);
  const byPrimary = new Map<Redis, string[]>();
  for (let tag = 0; tag < 256; tag++) {
    const key = capIdentityKey(namespace, tag);
    const slot = Number(await nodes[0]?.call("CLUSTER", "KEYSLOT", key));
    const owner = primaries.find(({ slots }) => slots.some(([from, to]) => slot >= from && slot <= to));
    if (!owner) throw new Error(`no primary serves slot ${slot}`);
    byPrimary.set(owner.node, [...(byPrimary.get(owner.node) ?? []), key]);
  }
  return byPrimary;
}

describe("Redis Functions (redis-functions.ts)", () => {
  it("routes FCALL by its first key: keys on every shard answer from their own primary, with no redirection", async () => {
    const library = echoLibrary("routing");
    await loadLibrary(cluster, library);
    // a client that refuses to follow MOVED: a call sent to the wrong primary fails
    const strict = new Cluster(
      clusterPorts.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })),
      { maxRedirections: 0, enableAutoPipelining: true },
    );
    try {
      const byPrimary = await keysByPrimary(uniqueNamespace());
      expect(byPrimary.size).toBe(3);
      for (const keys of byPrimary.values()) {
        const replies = await Promise.all(keys.map((key) => fcallBuffer(strict, library, "echo", [key], [])));
        expect(replies.map(String)).toEqual(keys);
      }
      // the check can fail: with its slot pointed at another primary, the same call is refused
      const [ownerKeys, otherKeys] = [...byPrimary.values()] as [string[], string[]];
      const slot = Number(await nodes[0]?.call("CLUSTER", "KEYSLOT", ownerKeys[0] as string));
      const otherSlot = Number(await nodes[0]?.call("CLUSTER", "KEYSLOT", otherKeys[0] as string));
      const slots = strict.slots as string[][];
      slots[slot] = slots[otherSlot] as string[];
      await expect(fcallBuffer(strict, library, "echo", [ownerKeys[0] as string], [])).rejects.toThrow(/MOVED/);
    } finally {
      strict.disconnect();
      await Promise.all((await primariesOf(nodes)).map(({ node }) => node.function("DELETE", library.name)));
    }
  });

  it("FUNCTION FLUSH on one primary: the next call there loads the library again and succeeds", async () => {
    // this test's own version of cap-sends (another hash), so no other test file loads it meanwhile
    const library = defineLibrary({ capSends: `${load("cap-sends")}\n-- flush test` });
    const store: CapStore = {
      capSends: (keys, args) =>
        redisCallsOf(cluster).call("cap-sends", keys, () => fcallBuffer(cluster, library, "capSends", keys, args), {
          deadlineMs: 6_000,
          retryOn: "no-answer",
        }),
    };
    const capper = new Capper({
      store,
      rules: () => rulesOf(simplePolicy({ push: [{ window: "1d", max: 1 }] })),
      clock: fixedClock(T0 + DAY),
      namespace: uniqueNamespace(),
    });
    // every tag, so every primary gets calls; the first calls load the library wherever it is missing
    const batch = {
      campaignId: "one",
      channel: "push",
      userIds: Array.from({ length: 256 }, (_, tag) => tag * 1_024),
      at: T0 + DAY,
    };
    try {
      expect((await capper.capBatch(batch)).totals.unsegmented).toMatchObject({ allowed: 256 });
      const primaries = await primariesOf(nodes);
      for (const { node } of primaries) expect(await holds(node, library)).toBe(true);
      const flushed = primaries[0]?.node as Redis;
      await flushed.function("FLUSH");
      expect(await holds(flushed, library)).toBe(false);
      for (const { node } of primaries.slice(1)) expect(await holds(node, library)).toBe(true);
      // decided once each, the first send seen as a duplicate, on the flushed primary too
      expect((await capper.capBatch(batch)).totals.unsegmented).toMatchObject({ allowed: 0, duplicate: 256 });
      expect(await holds(flushed, library)).toBe(true);
      expect((await capper.capBatch({ ...batch, campaignId: "two" })).totals.unsegmented).toMatchObject({
        capped: 256,
      });
    } finally {
      for (const { node } of await primariesOf(nodes)) await node.function("DELETE", library.name).catch(() => {});
    }
  });

  it("a library that fails to load answers its own error reply, once (not 'Function not found', not an outage)", async () => {
    const broken = defineLibrary({ broken: "return function(keys, args) return (end" });
    const error = await redisCallsOf(cluster)
      .call("broken", ["x"], () => fcallBuffer(cluster, broken, "broken", ["x"], []), {
        deadlineMs: 2_000,
        retryOn: "no-answer",
      })
      .catch((failure: unknown) => failure);
    expect(error).toBeInstanceOf(StoreReplyError);
    expect((error as Error).message).toMatch(/Error registering functions|Error compiling function/);
    expect((error as Error).message).not.toMatch(/Function not found/);
  });

  it("two versions of the library coexist on a node (a rollout): each is called by its own names", async () => {
    const [older, newer] = [echoLibrary("v1"), echoLibrary("v2")];
    expect(older.name).not.toBe(newer.name);
    expect(older.functions.echo).not.toBe(newer.functions.echo);
    try {
      await loadLibrary(cluster, older);
      await loadLibrary(cluster, newer);
      // loading again is harmless: "already exists" is success
      await loadLibrary(cluster, newer);
      const key = capIdentityKey(uniqueNamespace(), 3);
      const [a, b] = await Promise.all([
        fcallBuffer(cluster, older, "echo", [key], []),
        fcallBuffer(cluster, newer, "echo", [key], []),
      ]);
      expect(String(a)).toBe(String(b));
    } finally {
      for (const { node } of await primariesOf(nodes)) {
        for (const library of [older, newer]) await node.function("DELETE", library.name).catch(() => {});
      }
    }
  });
});

describe("loading through a failover the client has not seen", () => {
  it("a load skips the demoted primary (READONLY) and loads the promoted replica", async () => {
    const client = connectCluster();
    const library = echoLibrary(`failover-${uniqueNamespace()}`);
    try {
      await client.cluster("SLOTS"); // connected, with the slot map as it is now
      const roles = await Promise.all(nodes.map(async (node) => (await node.role())[0]));
      const replica = nodes[roles.indexOf("slave")] as Redis;
      const masterPort = Number((await replica.role())[2]);
      const demoted = nodes.find((node) => node.options.port === masterPort) as Redis;
      await replica.call("CLUSTER", "FAILOVER");
      // promoted, and the old primary a replica already: a load it accepted in between would be lost
      for (let tries = 0; (await replica.role())[0] !== "master" || (await demoted.role())[0] !== "slave"; tries++) {
        if (tries > 200) throw new Error("the replica was not promoted");
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      // the client still lists the demoted node as a primary: its load answers READONLY, and is skipped
      await loadLibrary(client, library);
      expect(await holds(replica, library)).toBe(true);
      for (const { node } of await primariesOf(nodes)) expect(await holds(node, library)).toBe(true);
    } finally {
      for (const { node } of await primariesOf(nodes)) await node.function("DELETE", library.name).catch(() => {});
      await client.quit();
      await waitForCluster({ basePort });
    }
  });
});

describe("no state of one cap-sends call reaches the next (the library's per-call locals)", () => {
  it("FCALL decides and reports as the same chunk run whole per call (EVAL), with other calls in between", async () => {
    cluster.defineCommand("capSendsWhole", { numberOfKeys: 1, lua: evalScriptOf(load("cap-sends")) });
    const whole = cluster as TollgateCluster & {
      capSendsWholeBuffer(...keysAndArgs: (string | Buffer)[]): Promise<Buffer>;
    };
    const evalStore: CapStore = { capSends: (keys, args) => whole.capSendsWholeBuffer(...keys, ...args) };
    const fcallStore = new RedisCapStore(cluster);
    const cap = fc.record({ window: fc.constantFrom("1m", "1h", "1d"), max: fc.integer({ min: 0, max: 3 }) });
    const op = fc.record({
      kind: fc.constantFrom("batch", "peek", "check", "peekCheck"),
      channel: fc.constantFrom("push", "email"),
      campaignId: fc.constantFrom("", "c1", "c2"),
      // a page's worth of neighbours (the block path) or a few scattered users (records)
      users: fc.oneof(
        fc.integer({ min: 0, max: 1_000 }).map((first) => Array.from({ length: 40 }, (_, i) => first + i)),
        fc.uniqueArray(fc.integer({ min: 0, max: 70_000 }), { minLength: 1, maxLength: 6 }),
      ),
      elapsedMs: fc.integer({ min: 0, max: 2 * 3_600_000 }),
      skewMs: fc.integer({ min: -60_000, max: 60_000 }),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.array(cap, { minLength: 1, maxLength: 2 }),
        fc.array(cap, { maxLength: 2 }),
        fc.array(op, { minLength: 1, maxLength: 8 }),
        async (pushCaps, emailCaps, ops) => {
          const clock = fixedClock(T0 + 5 * DAY);
          const rules = rulesOf(simplePolicy({ push: pushCaps, email: emailCaps }), { new: [3, 70, 700, 5_000] });
          const capperOn = (store: CapStore, namespace: string) =>
            new Capper({ store, rules: () => rules, clock, namespace });
          const [byFunction, byEval] = [
            capperOn(fcallStore, uniqueNamespace()),
            capperOn(evalStore, uniqueNamespace()),
          ];
          // between two FCALLs of the property, a call of another policy, channel, campaign, mode and layout
          const noise = new Capper({
            store: fcallStore,
            rules: () =>
              rulesOf(
                simplePolicy({
                  sms: [
                    { window: "1h", max: 1 },
                    { window: "7d", max: 50 },
                  ],
                }),
              ),
            clock,
            namespace: uniqueNamespace(),
          });
          for (const [index, { kind, channel, campaignId, users, elapsedMs, skewMs }] of ops.entries()) {
            clock.advance(elapsedMs);
            const at = clock.now() + skewMs;
            const first = users[0] as number;
            const run = async (capper: Capper) => {
              if (kind === "check" || kind === "peekCheck") {
                return capper.checkUser({
                  userId: first,
                  channel,
                  at,
                  ...(campaignId ? { campaignId } : {}),
                  ...(kind === "peekCheck" ? { consume: false } : {}),
                });
              }
              const batch = { campaignId: campaignId || "c0", channel, userIds: users, at };
              return kind === "batch" ? capper.capBatch(batch) : capper.peek(batch);
            };
            await noise.capBatch({
              campaignId: `noise-${index}`,
              channel: "sms",
              userIds: Array.from({ length: 300 }, (_, i) => first + i * 3),
              at: clock.now(),
            });
            const viaFunction = await run(byFunction);
            await noise.checkUser({ userId: first + 1, channel: "sms", at: clock.now() });
            expect(viaFunction).toEqual(await run(byEval));
          }
        },
      ),
      { numRuns: 25 },
    );
  });
});
