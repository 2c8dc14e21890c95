// The rotation function's steps on the local cluster, an ACL user standing for the ElastiCache user: setSecret
// makes a real client authenticate with the pending password and still with the current one, testSecret
// proves both with real connections, finishSecret leaves only the new one. A service client reading the
// secret on WRONGPASS keeps every call succeeding through all four steps and its connections dropped.
import { Redis } from "ioredis";
import { afterEach, describe, expect, it } from "vitest";
import { aclCacheCredentials } from "../../../functions/adapters/acl-cache-credentials.ts";
import { redisAuthenticator } from "../../../functions/adapters/redis-authentication.ts";
import { createRedisCluster, redisCallsOf } from "../../../functions/adapters/redis-cluster.ts";
import { type ROTATION_STEPS, rotate } from "../../../functions/core/shared/credential-rotation.ts";
import { AclUser } from "../../support/acl-rotation.ts";
import { clusterPorts, uniqueNamespace } from "../../support/cluster.ts";
import { SecretsModel } from "../../support/secret-versions.ts";

const OLD = "old-password-0123456789";
const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step();
});

describe("cache password rotation on the local cluster's ACL user", () => {
  it("accepts the pending password beside the current one, then the new one alone; 0 failed calls of a client meanwhile", async () => {
    const namespace = uniqueNamespace();
    const user = await AclUser.create(`rot-${namespace}`, OLD);
    cleanup.push(() => user.remove());
    const nodes = clusterPorts.map((port) => new Redis({ host: "127.0.0.1", port }));
    cleanup.push(() => {
      for (const node of nodes) node.disconnect();
    });
    const authenticate = redisAuthenticator({
      node: { host: "127.0.0.1", port: clusterPorts[0] as number },
      tls: false,
    });
    const secrets = new SecretsModel(OLD);
    const credentials = aclCacheCredentials({ nodes, userName: user.name, authenticate });
    const step = (s: (typeof ROTATION_STEPS)[number]) =>
      rotate({ secretId: "tollgate-redis", token: "v2", step: s }, { secrets, credentialsOf: () => credentials });
    const accepts = (password: string) =>
      authenticate(password, user.name).then(
        () => true,
        () => false,
      );

    // the service: connected with the current password, reading the secret again when Redis refuses it
    const cluster = createRedisCluster({
      nodes: clusterPorts.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })),
      username: user.name,
      password: OLD,
      readPassword: async () => secrets.current() as string,
    });
    cleanup.push(() => cluster.disconnect());
    const outcomes = { ok: 0, failed: [] as unknown[] };
    let member = 0;
    const burst = () =>
      Promise.all(
        Array.from({ length: 20 }, (_, i) => {
          const key = `${namespace}:{${i % 3}}:calls`;
          const id = String(member++);
          return redisCallsOf(cluster)
            .call("sadd", [key], () => cluster.sadd(key, id), { deadlineMs: 2_000, retryOn: "no-answer" })
            .then(
              () => outcomes.ok++,
              (error: unknown) => outcomes.failed.push(error),
            );
        }),
      );

    secrets.startRotation("v2");
    await burst();
    await step("createSecret");
    const pending = (await secrets.value("tollgate-redis", "AWSPENDING", "v2")) as string;
    expect(await accepts(pending)).toBe(false);
    await step("setSecret");
    // a real client with the pending password, then one with the current: both in during the overlap
    expect(await accepts(pending)).toBe(true);
    expect(await accepts(OLD)).toBe(true);
    await burst();
    await step("testSecret");
    await burst();
    await step("finishSecret");
    expect(secrets.current()).toBe(pending);
    expect(await accepts(pending)).toBe(true);
    expect(await accepts(OLD)).toBe(false);
    await burst();
    // a failover or node replacement after the rotation: every connection opened again, the old password first
    await user.dropConnections(cluster);
    await burst();

    expect(outcomes.failed).toEqual([]);
    expect(outcomes.ok).toBe(100);
  });
});
