// RedisCalls holds the primaries' sockets until the event loop's check phase so that concurrent calls leave
// in one write per node: on the real cluster, every caller still gets its own reply, and no socket stays held.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createRedisCluster,
  RedisLimitStore,
  type TollgateCluster,
} from "../../../functions/adapters/redis-cluster.ts";
import { Limiter } from "../../../functions/core/limits/limiter.ts";
import { clusterPorts, uniqueNamespace } from "../../support/cluster.ts";

let cluster: TollgateCluster;
beforeAll(async () => {
  // the check API's client: no autopipelining, each call its own command
  cluster = createRedisCluster({
    nodes: clusterPorts.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })),
    autoPipelining: false,
  });
  await Promise.all(cluster.nodes("master").map((node) => node.ping()));
});
afterAll(async () => {
  await cluster.quit();
});

const MAX = 1_000_000;
const limit = { algorithm: "fixed-window", max: MAX, windowMs: 3_600_000 } as const;

describe("writes coalesced per turn of the event loop", () => {
  it("answers each of 600 concurrent checks on 50 keys with its own count", async () => {
    const limiter = new Limiter({
      store: new RedisLimitStore(cluster, { deadlineMs: 10_000 }),
      namespace: uniqueNamespace(),
    });
    const keys = Array.from({ length: 600 }, (_, i) => `k${i % 50}`);
    const results = await Promise.all(keys.map((key) => limiter.check({ ...limit, key })));
    // each key was charged 12 times: its replies are exactly the counts 1..12, each once
    const remaining = new Map<string, number[]>();
    results.forEach((result, i) => {
      expect(result.allowed).toBe(true);
      remaining.set(keys[i] as string, [...(remaining.get(keys[i] as string) ?? []), result.remaining]);
    });
    for (const values of remaining.values()) {
      expect(values.sort((a, b) => b - a)).toEqual(Array.from({ length: 12 }, (_, i) => MAX - 1 - i));
    }
  });

  it("holds no socket once the burst is answered, and answers a lone call after a burst", async () => {
    const limiter = new Limiter({
      store: new RedisLimitStore(cluster, { deadlineMs: 10_000 }),
      namespace: uniqueNamespace(),
    });
    await Promise.all(Array.from({ length: 100 }, (_, i) => limiter.check({ ...limit, key: `burst${i}` })));
    for (const node of cluster.nodes("master")) expect(node.stream.writableCorked).toBe(0);
    const lone = await limiter.check({ ...limit, key: "lone" });
    expect(lone).toMatchObject({ allowed: true, remaining: MAX - 1 });
    for (const node of cluster.nodes("master")) expect(node.stream.writableCorked).toBe(0);
  });
});
