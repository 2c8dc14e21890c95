// What a tenant's own Redis user can and cannot do, on the real cluster (decision 0083). FCALL needs write
// access to every key it declares, and the quota script declares the rule's configuration: a read-only
// selector on `:cfg` (`%R~`) refuses the sync itself, so the tenant's user keeps write access to its own
// rules' configuration and can overspend its own quota. What the store holds is the part that matters:
// tenant A's user reads and writes no key of B's, and runs no command outside its pattern.
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
import { type SyncRequest, slotGroupKeys, tenantNamespace } from "../../../sdk/src/protocol/index.ts";
import { redisTransport } from "../../../sdk/src/transports/redis.ts";
import { clusterPorts, connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { approximateRule } from "../../support/quota-sync-calls.ts";

const namespace = uniqueNamespace();
const [A, B] = [`a${namespace.slice(2)}`, `b${namespace.slice(2)}`];
const passwords = { [A]: "own-config-a-0123456789", [B]: "own-config-b-0123456789" };
/** A user like A's, but with the rule configuration read-only: what would close the weakness, if FCALL took it. */
const READ_ONLY_CFG = `ro${namespace.slice(2)}`;
/** The same split patterns with the configuration writable: the control, which syncs. */
const SPLIT_RW = `rw${namespace.slice(2)}`;

let service: TollgateCluster;
let nodes: Redis[];
const asUser = (username: string, password: string) =>
  createRedisCluster({
    nodes: clusterPorts.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })),
    username,
    password,
  });
let asA: TollgateCluster;
let readOnlyCfg: TollgateCluster;
let splitRw: TollgateCluster;

beforeAll(async () => {
  service = connectCluster();
  await warmUp(service, { timeoutMs: 5_000 });
  for (const tenant of [A, B])
    await new RedisQuotaStore(service, tenantNamespace(namespace, tenant)).publish(
      "api",
      approximateRule([{ windowMs: 1000, max: 100 }]),
      "v1",
      1,
      1,
    );
  nodes = clusterPorts.map((port) => new Redis({ host: "127.0.0.1", port }));
  await setTenantAclUsers(
    nodes,
    namespace,
    [A, B].map((tenant) => ({ tenant, password: passwords[tenant] as string })),
  );
  // the tenant's own access string, with its one key pattern split so that only the configuration is read-only
  const own = `${tenantNamespace(namespace, A)}:q:`;
  const split = (cfg: "%R" | "%RW") =>
    tenantAccessString(namespace, A)
      .split(" ")
      .flatMap((rule) =>
        rule.startsWith("~")
          ? [`%RW~${own}*:k:*`, `%RW~${own}*:seq`, `%RW~${own}*:inst`, `${cfg}~${own}*:cfg`]
          : [rule],
      );
  for (const node of nodes) {
    await node.call("ACL", "SETUSER", READ_ONLY_CFG, "reset", ...split("%R"), `>${passwords[A]}`);
    await node.call("ACL", "SETUSER", SPLIT_RW, "reset", ...split("%RW"), `>${passwords[A]}`);
  }
  asA = asUser(tenantUserName(A), passwords[A] as string);
  readOnlyCfg = asUser(READ_ONLY_CFG, passwords[A] as string);
  splitRw = asUser(SPLIT_RW, passwords[A] as string);
});
afterAll(async () => {
  await Promise.all([asA.quit(), readOnlyCfg.quit(), splitRw.quit()]);
  for (const node of nodes) await node.call("ACL", "DELUSER", READ_ONLY_CFG, SPLIT_RW);
  await removeTenantAclUsers(nodes, [A, B]);
  await Promise.all(nodes.map((node) => node.quit()));
  await service.quit();
});

let seq = 0;
const sync = (): SyncRequest => ({
  instanceId: "own-config",
  rule: "api",
  group: 0,
  seq: ++seq,
  configVersion: "",
  entries: [{ key: "user-1", usage: [[Date.now(), 1]], refunds: [], offered: 1, want: 0 }],
});

/** Every key of B's namespace with its dumped value: compared whole before and after A's attempts. */
async function keysOfB(): Promise<Map<string, string>> {
  const found = new Map<string, string>();
  for (const node of service.nodes("master"))
    for (const key of await node.keys(`${tenantNamespace(namespace, B)}:*`))
      found.set(key, ((await node.dumpBuffer(key)) ?? Buffer.alloc(0)).toString("hex"));
  return found;
}

describe("a tenant's Redis user and its own rules' configuration", () => {
  it("cannot sync with the configuration read-only: FCALL needs write access to every key it declares", async () => {
    const refused = redisTransport({ redis: readOnlyCfg, namespace, tenant: A }).sync(sync(), Date.now());
    await expect(refused).rejects.toBeInstanceOf(SyncRejectedError);
    await expect(refused).rejects.toThrow(/NOPERM/);
    // the same user reads the configuration: the selector is in force, it is FCALL's declared keys that need RW
    const config = slotGroupKeys(tenantNamespace(namespace, A), "api", 0).config;
    expect(await readOnlyCfg.hget(config, "v")).toBe("v1");
    // and with the same patterns, the configuration writable, the sync runs: it was the read-only `:cfg`
    const control = redisTransport({ redis: splitRw, namespace, tenant: A }).sync(sync(), Date.now());
    expect(await control).toMatchObject({ status: "applied" });
  });

  it("so its own user syncs, and can rewrite its own rule's configuration (the accepted weakness)", async () => {
    const ownUser = redisTransport({ redis: asA, namespace, tenant: A });
    expect(await ownUser.sync(sync(), Date.now())).toMatchObject({ status: "applied" });
    const config = slotGroupKeys(tenantNamespace(namespace, A), "api", 0).config;
    expect(await asA.call("HSET", config, "v", "v1")).toBe(0);
  });
});

describe("tenant A's Redis user against tenant B and the store", () => {
  it("reads and writes no key of B's, with any command it has, and B's keys stay byte for byte", async () => {
    const before = await keysOfB();
    expect(before.size).toBeGreaterThan(0);
    for (const key of before.keys()) {
      await expect(asA.call("HGETALL", key), key).rejects.toThrow(/NOPERM/);
      await expect(asA.call("HSET", key, "r", "approximate|1000|share|1|1000:1000000"), key).rejects.toThrow(/NOPERM/);
      await expect(asA.call("DEL", key), key).rejects.toThrow(/NOPERM/);
      await expect(asA.call("PEXPIRE", key, "1"), key).rejects.toThrow(/NOPERM/);
      await expect(asA.call("ZADD", key, "1", "x"), key).rejects.toThrow(/NOPERM/);
    }
    // nor through the library: the quota function on B's keys
    await expect(redisTransport({ redis: asA, namespace, tenant: B }).sync(sync(), Date.now())).rejects.toThrow(
      /NOPERM/,
    );
    expect(await keysOfB()).toEqual(before);
  });

  it("runs no command outside its pattern: FLUSHALL, CONFIG, KEYS, SCAN, EVAL, FUNCTION, ACL, CLIENT", async () => {
    const primary = new Redis({
      host: "127.0.0.1",
      port: clusterPorts[0],
      username: tenantUserName(A),
      password: passwords[A],
    });
    try {
      const refused: string[][] = [
        ["FLUSHALL"],
        ["FLUSHDB"],
        ["CONFIG", "GET", "*"],
        ["CONFIG", "SET", "maxmemory", "1"],
        ["KEYS", "*"],
        ["SCAN", "0"],
        ["EVAL", "return redis.call('FLUSHALL')", "0"],
        ["FUNCTION", "FLUSH"],
        ["FUNCTION", "DELETE", "tollgate_quota"],
        ["ACL", "LIST"],
        ["CLIENT", "KILL", "TYPE", "normal"],
        ["SHUTDOWN", "NOSAVE"],
      ];
      for (const [command, ...args] of refused)
        await expect(primary.call(command as string, ...args), command).rejects.toThrow(/NOPERM/);
    } finally {
      await primary.quit();
    }
  });
});
