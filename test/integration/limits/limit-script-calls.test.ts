// RedisLimitStore calls the rate-limit scripts as Redis Functions (FCALL; the library loaded again where a
// node lacks it): on the real cluster, through an emptied function library, a slot migration (ASK, then
// MOVED to a node without the library) and a caller that gave up, each charge lands once, and an error
// reply is told apart from no reply.
import calculateSlot from "cluster-key-slot";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { limitLibrary } from "../../../functions/adapters/lua-scripts.ts";
import {
  createRedisCluster,
  RedisLimitStore,
  type TollgateCluster,
} from "../../../functions/adapters/redis-cluster.ts";
import { Limiter } from "../../../functions/core/limits/limiter.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { StoreReplyError, StoreUnavailableError } from "../../../functions/core/shared/errors.ts";
import { waitForCluster } from "../../../scripts/redis-cluster.ts";
import { limitKey, loadLibrary } from "../../../sdk/src/protocol/index.ts";
import { basePort, clusterPorts, primariesOf, uniqueNamespace } from "../../support/cluster.ts";
import { rejectionOf } from "../../support/rejection.ts";

let cluster: TollgateCluster;
const nodes: Redis[] = [];
beforeAll(async () => {
  // the check API's client: no autopipelining
  cluster = createRedisCluster({
    nodes: clusterPorts.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })),
    autoPipelining: false,
  });
  for (const port of clusterPorts) nodes.push(new Redis({ host: "127.0.0.1", port }));
});
afterAll(async () => {
  await cluster.quit();
  for (const node of nodes) node.disconnect();
});

const MAX = 1_000;
const HOUR = 3_600_000;
const limit = { algorithm: "fixed-window", max: MAX, windowMs: HOUR } as const;
// Every call of this file is decided at one instant. On the system clock a window ended between a test's
// charges and its last peek (an hour boundary during a slow slot move back), and the peek read 0. The start
// of the next hour: each window here begins there, and the states live at least that long by Redis' clock.
const clock = fixedClock(Math.ceil(Date.now() / HOUR) * HOUR);
const limiterOf = (namespace: string, deadlineMs = 10_000) =>
  new Limiter({ store: new RedisLimitStore(cluster, { deadlineMs }), namespace, clock });
/** How many charges the key holds (a peek: cost 0 changes nothing). */
const charged = async (limiter: Limiter, key: string) =>
  MAX - (await limiter.check({ ...limit, key, cost: 0 })).remaining;

const primaries = () => primariesOf(nodes);

/** Empties every primary's function libraries (a replica refuses the write; the flush reaches it anyway). */
const flushFunctions = async () => Promise.all((await primaries()).map(({ node }) => node.function("FLUSH")));

/** Moves `slot` and its keys from `source` to `target`, as redis-cli's resharding does. */
async function moveSlot(slot: number, source: { node: Redis; id: string }, target: { node: Redis; id: string }) {
  await target.node.call("CLUSTER", "SETSLOT", String(slot), "IMPORTING", source.id);
  await source.node.call("CLUSTER", "SETSLOT", String(slot), "MIGRATING", target.id);
  await endMove(slot, source, target);
}

/** The end of a slot's move: its remaining keys to `target`, which owns it from then on. */
async function endMove(slot: number, source: { node: Redis; id: string }, target: { node: Redis; id: string }) {
  await migrateKeys(slot, source.node, target.node);
  await target.node.call("CLUSTER", "SETSLOT", String(slot), "NODE", target.id);
  await source.node.call("CLUSTER", "SETSLOT", String(slot), "NODE", target.id);
}

async function migrateKeys(slot: number, source: Redis, target: Redis) {
  for (;;) {
    const keys = (await source.call("CLUSTER", "GETKEYSINSLOT", String(slot), "100")) as string[];
    if (keys.length === 0) return;
    await source.migrate("127.0.0.1", target.options.port as number, "", 0, 5_000, "KEYS", ...keys);
  }
}

describe("rate-limit scripts as Redis Functions", () => {
  it("runs after FUNCTION FLUSH on every node (Function not found, the library loaded, FCALL again), charging each call once", async () => {
    const limiter = limiterOf(uniqueNamespace());
    expect(await limiter.check({ ...limit, key: "k" })).toMatchObject({ allowed: true, remaining: MAX - 1 });
    await flushFunctions();
    expect(await limiter.check({ ...limit, key: "k" })).toMatchObject({ allowed: true, remaining: MAX - 2 });
    // loaded again on every primary: the next call finds it
    expect(await limiter.check({ ...limit, key: "k" })).toMatchObject({ allowed: true, remaining: MAX - 3 });
    expect(await charged(limiter, "k")).toBe(3);
    // /v1/limits' function too
    await flushFunctions();
    const all = await limiter.checkAll({ scope: "s", limits: [{ ...limit, key: "a" }] });
    expect(all.results[0]).toMatchObject({ allowed: true, remaining: MAX - 1 });
  });

  it("follows ASK while its slot migrates and MOVED after, to a node without the library, charging once each", async () => {
    const namespace = uniqueNamespace();
    const limiter = limiterOf(namespace);
    const key = `m-${namespace}`;
    const slot = calculateSlot(limitKey(namespace, limit.algorithm, key));
    const found = await primaries();
    const source = found.find((p) => p.slots.some(([from, to]) => slot >= from && slot <= to));
    const target = found.find((p) => p !== source);
    if (!source || !target) throw new Error(`no owner of slot ${slot}`);
    let moved = false;
    try {
      await target.node.function("FLUSH");
      await target.node.call("CLUSTER", "SETSLOT", String(slot), "IMPORTING", source.id);
      await source.node.call("CLUSTER", "SETSLOT", String(slot), "MIGRATING", target.id);
      // the key is not on the source: it answers ASK, and the call runs on the target (Function not found,
      // the library loaded, FCALL again)
      expect(await limiter.check({ ...limit, key })).toMatchObject({ allowed: true, remaining: MAX - 1 });
      expect(await target.node.call("CLUSTER", "GETKEYSINSLOT", String(slot), "100")).toContain(
        limitKey(namespace, limit.algorithm, key),
      );
      expect(await limiter.check({ ...limit, key })).toMatchObject({ allowed: true, remaining: MAX - 2 });
      // the migration ends; the client's slot map still names the source, which now answers MOVED
      await endMove(slot, source, target);
      moved = true;
      await target.node.function("FLUSH");
      expect(await limiter.check({ ...limit, key })).toMatchObject({ allowed: true, remaining: MAX - 3 });
      expect(await charged(limiter, key)).toBe(3);
    } finally {
      // the slot goes back to its owner, and the cluster is whole again for the next test
      if (!moved) await endMove(slot, source, target);
      await moveSlot(slot, target, source);
      await waitForCluster({ basePort });
    }
    expect(await charged(limiter, key)).toBe(3);
  });

  it("is not sent again when it may have run: a check whose caller gave up lands once, also after a reconnect", async () => {
    const namespace = uniqueNamespace();
    const key = "busy";
    const stateKey = limitKey(namespace, limit.algorithm, key);
    // a script that keeps the key's node busy for 300 ms: the check behind it waits in the socket
    const busy = cluster.eval(
      "local s = redis.call('TIME') repeat local n = redis.call('TIME') until (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > 300000 return 1",
      1,
      stateKey,
    );
    await new Promise((resolve) => setImmediate(resolve));
    const error = await rejectionOf(limiterOf(namespace, 100).check({ ...limit, key }));
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect((error as StoreUnavailableError).mayHaveRun).toBe(true);
    // the connection is dropped and opened again: the unanswered check is failed, never written again
    for (const node of cluster.nodes("master")) node.disconnect(true);
    await busy.catch(() => {});
    await waitForCluster({ basePort });
    const limiter = limiterOf(namespace);
    // the check that timed out reached Redis before the drop (it ran) or not: at most once
    const before = await charged(limiter, key);
    expect(before).toBeLessThanOrEqual(1);
    await limiter.check({ ...limit, key });
    expect(await charged(limiter, key)).toBe(before + 1);
  });

  it("tells an error reply (StoreReplyError, sent once, no reload) from no reply", async () => {
    const namespace = uniqueNamespace();
    const limiter = limiterOf(namespace);
    // a state of the wrong type: the script's GET answers WRONGTYPE
    const stateKey = limitKey(namespace, limit.algorithm, "wrong");
    await cluster.hset(stateKey, "field", "1");
    const ownerPort = Number(cluster.slots[calculateSlot(stateKey)]?.[0]?.split(":")[1]);
    const owner = nodes.find((node) => node.options.port === ownerPort);
    if (!owner) throw new Error(`no node at ${ownerPort}`);
    // loaded there, so the one call is an FCALL that runs and fails
    await loadLibrary(cluster, limitLibrary);
    await owner.config("RESETSTAT");
    const error = await rejectionOf(limiter.check({ ...limit, key: "wrong" }));
    expect(error).toBeInstanceOf(StoreReplyError);
    expect(error.message).toContain("WRONGTYPE");
    const stats = await owner.info("commandstats");
    expect(stats).toMatch(/cmdstat_fcall:calls=1,/);
    expect(stats).not.toMatch(/cmdstat_function\|load:/);
    expect(await cluster.hget(stateKey, "field")).toBe("1");
  });

  it("answers a peek (cost 0) of every algorithm, one limit or several, on a node past maxmemory, where a charge is refused (OOM)", async () => {
    const namespace = uniqueNamespace();
    const limiter = limiterOf(namespace);
    const specs = [
      { algorithm: "fixed-window", max: 5, windowMs: 60_000 },
      { algorithm: "sliding-window", max: 5, windowMs: 60_000 },
      { algorithm: "sliding-log", max: 5, windowMs: 60_000 },
      { algorithm: "token-bucket", max: 5, refillAmount: 1, refillEveryMs: 1_000 },
      { algorithm: "gcra", burst: 4, count: 5, periodMs: 60_000 },
    ] as const;
    for (const spec of specs) await limiter.check({ ...spec, key: "full" });
    await loadLibrary(cluster, limitLibrary);
    const all = await primaries();
    const before = await Promise.all(all.map(({ node }) => node.config("GET", "maxmemory") as Promise<string[]>));
    try {
      await Promise.all(all.map(({ node }) => node.config("SET", "maxmemory", "1")));
      for (const spec of specs) {
        expect((await limiter.check({ ...spec, key: "full", cost: 0 })).remaining).toBe(4);
        const charge = await rejectionOf(limiter.check({ ...spec, key: "full" }));
        expect(charge).toBeInstanceOf(StoreReplyError);
        expect(charge.message).toContain("OOM");
      }
      // several limits of one scope, all peeks: the multi-limit reader (fresh keys: each has its whole limit)
      const several = await limiter.checkAll({
        scope: "full",
        limits: specs.map((spec, i) => ({ ...spec, key: `k${i}` })),
        cost: 0,
      });
      expect(several.results.map((result) => result.remaining)).toEqual([5, 5, 5, 5, 5]);
    } finally {
      await Promise.all(all.map(({ node }, i) => node.config("SET", "maxmemory", before[i]![1]!)));
    }
  });
});
