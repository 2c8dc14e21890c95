// AUTH rotation, the SDK's direct transport, on the local cluster with an ACL user: a sync refused for its
// password reads the secret again (`reauthenticate`), sets the new one on the caller's client and goes
// again; 0 failed syncs through ROTATE, SET and every connection dropped.
import { Cluster } from "ioredis";
import { afterEach, describe, expect, it } from "vitest";
import { AclUser } from "../../../test/support/acl-rotation.ts";
import { clusterPorts, connectCluster, uniqueNamespace } from "../../../test/support/cluster.ts";
import { SyncRejectedError } from "../../src/errors.ts";
import type { QuotaRule, SyncRequest } from "../../src/protocol/index.ts";
import { redisTransport } from "../../src/transports/redis.ts";
import { publishRule } from "../support/quota-cluster.ts";

const OLD = "old-token-0123456789abcdef";
const NEW = "new-token-fedcba9876543210";
// pinned: the time each sync is given (the script takes `now` from the call, never from a clock)
const T0 = Date.UTC(2026, 10, 23, 10);
const rule: QuotaRule = {
  mode: "approximate",
  limits: [{ windowMs: 60_000, max: 1_000_000 }],
  leaseMs: 200,
  fallback: "share",
  slotGroups: 1,
};
const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step();
});

/** The caller's own client, as a service has it: the ACL user's name and the password read at start. */
function callersClient(user: AclUser, password: string): Cluster {
  const cluster = new Cluster(
    clusterPorts.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })),
    { redisOptions: { username: user.name, password } },
  );
  cluster.on("error", () => {});
  cleanup.push(() => cluster.disconnect());
  return cluster;
}

describe("AUTH rotation, the direct transport", () => {
  it("keeps every sync succeeding through ROTATE, SET and every connection dropped: 0 failed syncs, each applied once", async () => {
    const namespace = uniqueNamespace();
    const admin = connectCluster();
    cleanup.push(() => admin.disconnect());
    await publishRule(admin, namespace, "api", rule, "v1");
    const user = await AclUser.create(`rot-${namespace}`, OLD);
    cleanup.push(() => user.remove());
    let secret = OLD;
    let reads = 0;
    const redis = callersClient(user, OLD);
    const transport = redisTransport({
      redis,
      namespace,
      timeoutMs: 2_000,
      reauthenticate: async () => {
        reads++;
        return secret;
      },
    });
    let seq = 0;
    const failed: unknown[] = [];
    const sync = async () => {
      seq++;
      const request: SyncRequest = {
        instanceId: "i-rotation",
        rule: "api",
        group: 0,
        seq,
        configVersion: "",
        entries: [{ key: "k", usage: [[T0, 1]], refunds: [], offered: 1, want: 0 }],
      };
      const reply = await transport.sync(request, T0 + seq).catch((error: unknown) => failed.push(error));
      return typeof reply === "object" ? reply.status : "failed";
    };

    const statuses: string[] = [];
    statuses.push(await sync());
    secret = NEW;
    await user.addPassword(NEW); // ROTATE
    statuses.push(await sync());
    await user.removePassword(OLD); // SET
    statuses.push(await sync());
    await user.dropConnections(redis); // a failover: every connection opened again, with the old token first
    for (let i = 0; i < 5; i++) statuses.push(await sync());

    expect(failed).toEqual([]);
    expect(statuses).toEqual(Array.from({ length: 8 }, () => "applied"));
    // read again on the refusal (the client's error events and the refused sync share a read in flight)
    expect(reads).toBeGreaterThanOrEqual(1);
    expect(reads).toBeLessThanOrEqual(3);
    expect(redis.options.redisOptions?.password).toBe(NEW);
  });

  it("without reauthenticate, a refused password is a refused sync, as any error reply", async () => {
    const namespace = uniqueNamespace();
    const user = await AclUser.create(`rot-${namespace}`, OLD);
    cleanup.push(() => user.remove());
    const admin = connectCluster();
    cleanup.push(() => admin.disconnect());
    await publishRule(admin, namespace, "api", rule, "v1");
    const redis = callersClient(user, OLD);
    const transport = redisTransport({ redis, namespace, timeoutMs: 2_000 });
    const request = (seq: number): SyncRequest => ({
      instanceId: "i-rotation",
      rule: "api",
      group: 0,
      seq,
      configVersion: "",
      entries: [{ key: "k", usage: [], refunds: [], offered: 0, want: 1 }],
    });
    expect((await transport.sync(request(1), T0)).status).toBe("applied");
    await user.addPassword(NEW);
    await user.removePassword(OLD);
    await user.dropConnections(redis);
    await expect(transport.sync(request(2), T0 + 1)).rejects.toThrow(SyncRejectedError);
  });
});
