// The engine through the faults a cluster has in production: emptied functions, a failover, no cluster.
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tollgateLibrary } from "../../../functions/adapters/lua-scripts.ts";
import { createRedisCluster, RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import type { CapBatchResult } from "../../../functions/core/capping/decisions.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { StoreUnavailableError } from "../../../functions/core/shared/errors.ts";
import { waitForCluster } from "../../../scripts/redis-cluster.ts";
import { basePort, clusterPorts, connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { DAY, rulesOf, simplePolicy, T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

const rules = rulesOf(simplePolicy({ push: [{ window: "1d", max: 2 }] }));
const retried: string[] = [];
const capperFor = (client: TollgateCluster, deadlineMs?: number) =>
  new Capper({
    store: new RedisCapStore(client, {
      ...(deadlineMs === undefined ? {} : { deadlineMs }),
      onRetry: (error) => retried.push(error.message),
    }),
    rules: () => rules,
    clock: fixedClock(T0 + DAY),
    namespace: uniqueNamespace(),
  });
/** 3,000 users spread over hundreds of slot groups, so every primary holds some. */
const users = Array.from({ length: 3000 }, (_, i) => i * 7919);
const counts = (result: CapBatchResult) => result.totals.unsegmented;

async function eachNode<T>(action: (node: Redis) => Promise<T>): Promise<T[]> {
  const nodes = clusterPorts.map((port) => new Redis({ host: "127.0.0.1", port, lazyConnect: true }));
  try {
    return await Promise.all(nodes.map(action));
  } finally {
    for (const node of nodes) node.disconnect();
  }
}

describe("faults", () => {
  it("recovers from emptied functions (FUNCTION FLUSH on every node) and counts once", async () => {
    const capper = capperFor(cluster);
    const batch = { campaignId: "one", channel: "push", userIds: users, at: T0 };
    expect(counts(await capper.capBatch(batch))).toMatchObject({ allowed: 3000 });
    // on the primaries: FUNCTION FLUSH replicates to their replicas
    await eachNode(async (node) => {
      if ((await node.role())[0] === "master") await node.function("FLUSH");
    });
    // (no check that the nodes are empty now: other test files' calls may already have loaded it again)
    // every call meets "Function not found": the library is loaded again and the call sent once more
    expect(counts(await capper.capBatch(batch))).toMatchObject({ allowed: 0, duplicate: 3000 });
    expect(counts(await capper.capBatch({ ...batch, campaignId: "two" }))).toMatchObject({ allowed: 3000 });
    expect(counts(await capper.capBatch({ ...batch, campaignId: "three" }))).toMatchObject({
      allowed: 0,
      capped: 3000,
    });
  });

  it("keeps deciding correctly through a replica promotion (CLUSTER FAILOVER), without a restart", async () => {
    const capper = capperFor(cluster);
    const batch = { campaignId: "before", channel: "push", userIds: users, at: T0 };
    expect(counts(await capper.capBatch(batch))).toMatchObject({ allowed: 3000 });

    const replicaPort = await findReplicaPort();
    const replica = new Redis({ host: "127.0.0.1", port: replicaPort });
    try {
      await replica.call("CLUSTER", "FAILOVER");
      for (let tries = 0; (await replica.role())[0] !== "master"; tries++) {
        if (tries > 200) throw new Error(`replica ${replicaPort} was not promoted`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      // FUNCTION LOAD replicated: the promoted replica holds the library before any call reaches it
      expect(await replica.function("LIST", "LIBRARYNAME", tollgateLibrary.name)).toHaveLength(1);
    } finally {
      replica.disconnect();
    }
    // the client's slot map still names the old primary: its calls meet MOVED and are retried
    retried.length = 0;
    const during = await capper.capBatch({ ...batch, campaignId: "after" });
    expect(counts(during)).toMatchObject({ allowed: 3000 });
    expect(retried.some((message) => message.includes(": not run: MOVED "))).toBe(true);
    expect(counts(await capper.capBatch({ ...batch, campaignId: "after" }))).toMatchObject({ duplicate: 3000 });
    // "before" and "after" both survived the promotion: a third send is capped everywhere
    expect(counts(await capper.capBatch({ ...batch, campaignId: "third" }))).toMatchObject({ capped: 3000 });
    await waitForCluster({ basePort });
  });

  it("fails with StoreUnavailableError, not a hang, when no node answers", async () => {
    const unreachable = createRedisCluster({ nodes: [{ host: "127.0.0.1", port: 1 }], connectTimeoutMs: 200 });
    try {
      const capper = capperFor(unreachable, 1_000);
      await expect(capper.capBatch({ campaignId: "x", channel: "push", userIds: [1, 2], at: T0 })).rejects.toThrow(
        StoreUnavailableError,
      );
    } finally {
      unreachable.disconnect();
    }
  });
});

async function findReplicaPort(): Promise<number> {
  const roles = await eachNode(async (node) => (await node.role())[0]);
  const index = roles.indexOf("slave");
  if (index < 0) throw new Error("no replica in the cluster");
  return clusterPorts[index] as number;
}
