// The direct transport's tenants on the real cluster: each tenant's ACL user (the access string the CDK
// gives its ElastiCache RBAC user) syncs through FCALL of the quota library in its own namespace, and is
// refused (NOPERM) everything outside it: another tenant's keys, plain commands, loading a library.
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRedisCluster, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { RedisQuotaStore } from "../../../functions/adapters/redis-quota-store.ts";
import { warmUp } from "../../../functions/adapters/redis-warm-up.ts";
import {
  removeTenantAclUsers,
  setTenantAclUsers,
  tenantAccessString,
  tenantUserName,
} from "../../../functions/app/tenant-redis-users.ts";
import { SyncRejectedError } from "../../../sdk/src/errors.ts";
import { type SyncRequest, tenantNamespace } from "../../../sdk/src/protocol/index.ts";
import { redisTransport } from "../../../sdk/src/transports/redis.ts";
import { clusterPorts, connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { approximateRule } from "../../support/quota-sync-calls.ts";

const namespace = uniqueNamespace();
// tenants of this file only: ACL users are per node, removed again after
const [A, B] = [`a${namespace.slice(2)}`, `b${namespace.slice(2)}`];
const passwords = { [A]: "secret-of-a-0123456789", [B]: "secret-of-b-0123456789" };

let service: TollgateCluster;
let nodes: Redis[];
let asA: TollgateCluster;
beforeAll(async () => {
  service = connectCluster();
  // the service loads the libraries (tenant users cannot) and writes each tenant's rule
  await warmUp(service, { timeoutMs: 5_000 });
  for (const tenant of [A, B])
    await new RedisQuotaStore(service, tenantNamespace(namespace, tenant)).publish(
      "api",
      approximateRule([{ windowMs: 1000, max: 100 }]),
      "v1",
      1,
      1,
    );
  nodes = clusterPorts.map((port) => new Redis({ host: "127.0.0.1", port, lazyConnect: false }));
  await setTenantAclUsers(
    nodes,
    namespace,
    [A, B].map((tenant) => ({ tenant, password: passwords[tenant] as string })),
  );
  asA = createRedisCluster({
    nodes: clusterPorts.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })),
    username: tenantUserName(A),
    password: passwords[A] as string,
  });
});
afterAll(async () => {
  await asA.quit();
  await removeTenantAclUsers(nodes, [A, B]);
  await Promise.all(nodes.map((node) => node.quit()));
  await service.quit();
});

const sync = (instanceId: string, seq: number): SyncRequest => ({
  instanceId,
  rule: "api",
  group: 0,
  seq,
  configVersion: "v1",
  entries: [{ key: "user-1", usage: [[Date.now(), 10]], refunds: [], offered: 10, want: 0 }],
});

/** Every key under `prefix` on the primaries. */
async function keysUnder(prefix: string): Promise<string[]> {
  const found: string[] = [];
  for (const node of service.nodes("master")) found.push(...(await node.keys(`${prefix}*`)));
  return found.sort();
}

describe("a tenant's ACL user", () => {
  it("has an access string of its own quota keys and the quota script's commands", () => {
    expect(tenantAccessString("tg", "checkout")).toMatch(/^on ~tg:t:checkout:q:\* -@all \+fcall \+fcall_ro \+del /);
  });

  it("syncs its own namespace through FCALL of the quota library", async () => {
    const reply = await redisTransport({ redis: asA, namespace, tenant: A }).sync(sync("a-1", 1), Date.now());
    expect(reply).toMatchObject({ status: "applied", instances: 1 });
    expect(await keysUnder(`${tenantNamespace(namespace, A)}:q:{api.0}:k:`)).toHaveLength(1);
  });

  it("is refused another tenant's namespace, and nothing of it changes", async () => {
    const before = await keysUnder(`${tenantNamespace(namespace, B)}:`);
    const intoB = redisTransport({ redis: asA, namespace, tenant: B }).sync(sync("a-1", 2), Date.now());
    await expect(intoB).rejects.toBeInstanceOf(SyncRejectedError);
    await expect(intoB).rejects.toThrow(/NOPERM/);
    // the deployment's own namespace (the service's keys) is outside its pattern too
    await expect(redisTransport({ redis: asA, namespace }).sync(sync("a-1", 3), Date.now())).rejects.toThrow(/NOPERM/);
    expect(await keysUnder(`${tenantNamespace(namespace, B)}:`)).toEqual(before);
  });

  it("touches no other tenant's key, runs no command but the script's, and cannot load or replace a library", async () => {
    const own = `${tenantNamespace(namespace, A)}:q:{api.0}:k:user-1`;
    const ofB = `${tenantNamespace(namespace, B)}:q:{api.0}:cfg`;
    // another tenant's rule configuration: neither read nor written with the script's own commands
    await expect(asA.call("HSET", ofB, "r", "approximate|1000|share|1|1000:1000000000")).rejects.toThrow(/NOPERM/);
    await expect(asA.call("HGET", ofB, "r")).rejects.toThrow(/NOPERM/);
    await expect(asA.call("DEL", `${namespace}:rl:{k}:gcra`)).rejects.toThrow(/NOPERM/);
    await expect(asA.call("SET", own, "1")).rejects.toThrow(/NOPERM/);
    await expect(asA.call("KEYS", "*")).rejects.toThrow(/NOPERM/);
    await expect(asA.call("FLUSHALL")).rejects.toThrow(/NOPERM/);
    const primary = new Redis({
      host: "127.0.0.1",
      port: clusterPorts[0],
      username: tenantUserName(A),
      password: passwords[A],
    });
    try {
      await expect(
        primary.call(
          "FUNCTION",
          "LOAD",
          "REPLACE",
          "#!lua name=evil\nredis.register_function('x', function() return 1 end)",
        ),
      ).rejects.toThrow(/NOPERM/);
      await expect(primary.call("ACL", "SETUSER", tenantUserName(A), "+@all")).rejects.toThrow(/NOPERM/);
    } finally {
      await primary.quit();
    }
  });

  it("is refused with a wrong password", async () => {
    const wrong = new Redis({
      host: "127.0.0.1",
      port: clusterPorts[0],
      username: tenantUserName(A),
      password: "guessed",
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    const refused = new Promise<Error>((resolve) => wrong.once("error", resolve));
    await wrong.connect().catch(() => {});
    expect((await refused).message).toMatch(/WRONGPASS/);
    wrong.disconnect();
  });
});
