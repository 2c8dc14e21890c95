// "Redis did not answer" and "Redis answered with an error" read apart, on the real cluster: error
// replies (a script error, CROSSSLOT, an out-of-range TTL, a key of the wrong type) are StoreReplyError,
// never retried and never counted as an outage; a command whose caller gave up is not sent again.
import { Cluster } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CrossSlotError } from "../../../functions/adapters/redis-calls.ts";
import {
  createRedisCluster,
  RedisCapStore,
  redisCallsOf,
  type TollgateCluster,
} from "../../../functions/adapters/redis-cluster.ts";
import { classifyRedisError } from "../../../functions/adapters/redis-errors.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { StoreReplyError, StoreUnavailableError } from "../../../functions/core/shared/errors.ts";
import { capIdentityKey, capTagOf } from "../../../sdk/src/protocol/index.ts";
import { clusterPorts, uniqueNamespace } from "../../support/cluster.ts";
import { rejectionOf } from "../../support/rejection.ts";
import { DAY, rulesOf, simplePolicy, T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  // a client of its own, so the circuit it opens or keeps closed is this file's
  cluster = createRedisCluster({
    nodes: clusterPorts.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })),
    circuit: { threshold: 2 },
  });
});
afterAll(async () => {
  await cluster.quit();
});

const retried: Error[] = [];
const call = <T>(what: string, keys: string[], send: () => Promise<T>) =>
  redisCallsOf(cluster).call(what, keys, send, {
    deadlineMs: 2_000,
    retryOn: "no-answer",
    onRetry: (error) => retried.push(error),
  });

describe("error replies are StoreReplyError", () => {
  it("a script error carries Redis' reply, is not retried and is not an outage", async () => {
    retried.length = 0;
    const key = `${uniqueNamespace()}:script`;
    const error = await rejectionOf(call("eval", [key], () => cluster.eval("error('boom in the script')", 1, key)));
    expect(error).toBeInstanceOf(StoreReplyError);
    expect(error).not.toBeInstanceOf(StoreUnavailableError);
    expect((error as StoreReplyError).reply).toContain("boom in the script");
    expect((error as StoreReplyError).code).toBe("ERR");
    expect(retried).toEqual([]);
  });

  it("CROSSSLOT from Redis is a StoreReplyError", async () => {
    // without autopipelining ioredis sends the command and Redis answers CROSSSLOT
    const plain = new Cluster(clusterPorts.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })));
    try {
      const ns = uniqueNamespace();
      const error = await rejectionOf(plain.eval("return 1", 2, `{${ns}a}:x`, `{${ns}b}:y`));
      const classified = classifyRedisError(error, "eval");
      expect(classified).toBeInstanceOf(StoreReplyError);
      expect((classified as StoreReplyError).code).toBe("CROSSSLOT");
    } finally {
      plain.disconnect();
    }
  });

  it("keys of several slots are refused before they are sent, as a defect, not an outage", async () => {
    const ns = uniqueNamespace();
    const keys = [`{${ns}a}:x`, `{${ns}b}:y`];
    const error = await rejectionOf(call("eval", keys, () => cluster.eval("return 1", 2, ...keys)));
    expect(error).toBeInstanceOf(CrossSlotError);
    expect(error).not.toBeInstanceOf(StoreUnavailableError);
    expect(error.message).toContain(keys[1]);
  });

  it("an out-of-range TTL is a StoreReplyError", async () => {
    const key = `${uniqueNamespace()}:ttl`;
    const error = await rejectionOf(call("set", [key], () => cluster.set(key, "v", "PX", "9223372036854775807")));
    expect(error).toBeInstanceOf(StoreReplyError);
    expect((error as StoreReplyError).reply).toMatch(/^ERR .*expire/);
  });

  it("never opens the circuit, however many in a row", async () => {
    for (let i = 0; i < 5; i++) {
      await expect(call("eval", ["k"], () => cluster.eval("error('again')", 1, "k"))).rejects.toThrow(StoreReplyError);
    }
    expect(redisCallsOf(cluster).circuit).toBe("closed");
    expect(await call("ping", [], () => cluster.ping())).toBe("PONG");
  });

  it("a block of the wrong type fails that capper call with StoreReplyError, not StoreUnavailableError", async () => {
    const namespace = uniqueNamespace();
    const capper = new Capper({
      store: new RedisCapStore(cluster, { onRetry: (error) => retried.push(error) }),
      rules: () => rulesOf(simplePolicy({ push: [{ window: "1d", max: 2 }] })),
      clock: fixedClock(T0 + DAY),
      namespace,
    });
    retried.length = 0;
    // a set where the script keeps the tag's identity hash: the script's HGET on it answers WRONGTYPE
    await cluster.sadd(capIdentityKey(namespace, capTagOf(5)), "not a block");
    const error = await rejectionOf(capper.capBatch({ campaignId: "c", channel: "push", userIds: [5], at: T0 }));
    expect(error).toBeInstanceOf(StoreReplyError);
    expect(retried).toEqual([]);
    // users of other tags are decided as usual
    const other = await capper.capBatch({ campaignId: "c", channel: "push", userIds: [5_000_000], at: T0 });
    expect(other.decisions.map((d) => d.decision)).toEqual(["allowed"]);
  });
});

describe("a command whose caller gave up", () => {
  it("is not sent again when it may have run: an INCR that timed out lands once", async () => {
    const key = `${uniqueNamespace()}:charge`;
    // a script that keeps the key's node busy for 300 ms: the INCR behind it waits in the socket. Valkey
    // answers every TIME in a script with the script's start, so it spins on os.clock (CPU time), which
    // Redis 7.0 does not offer
    const busy = cluster.eval(
      "local ok, clock = pcall(function() return os.clock end) " +
        "if ok and clock then local s = clock() repeat until clock() - s > 0.3 return 1 end " +
        "local s = redis.call('TIME') repeat local n = redis.call('TIME') until (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > 300000 return 1",
      1,
      key,
    );
    await new Promise((resolve) => setImmediate(resolve));
    retried.length = 0;
    const error = await rejectionOf(
      redisCallsOf(cluster).call("incr", [key], () => cluster.incr(key), { deadlineMs: 100, retryOn: "not-run" }),
    );
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect((error as StoreUnavailableError).mayHaveRun).toBe(true);
    await busy;
    // the command reached Redis before its caller gave up, so it ran, and only once
    expect(await cluster.get(key)).toBe("1");
  });
});
