// AUTH rotation, the service's side, on the local cluster with an ACL user: Redis refuses the password a
// call went out with, the secret is read again, and the call goes again on the new one (it did not run).
import { afterEach, describe, expect, it } from "vitest";
import { createRedisCluster, redisCallsOf, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { StoreReplyError } from "../../../functions/core/shared/errors.ts";
import { AclUser } from "../../support/acl-rotation.ts";
import { clusterPorts, connectCluster, uniqueNamespace } from "../../support/cluster.ts";

const OLD = "old-token-0123456789abcdef";
const NEW = "new-token-fedcba9876543210";
const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step();
});

/** A cluster client of the ACL user `user` holding `password`, reading the secret through `secret`. */
function clientOf(user: AclUser, password: string, secret: () => Promise<string>): TollgateCluster {
  const cluster = createRedisCluster({
    nodes: clusterPorts.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })),
    username: user.name,
    password,
    readPassword: secret,
  });
  cleanup.push(() => cluster.disconnect());
  return cluster;
}

describe("AUTH rotation, service side", () => {
  it("keeps every call succeeding through ROTATE, SET and every connection dropped: 0 failed calls, none lost", async () => {
    const namespace = uniqueNamespace();
    const user = await AclUser.create(`rot-${namespace}`, OLD);
    cleanup.push(() => user.remove());
    let secret = OLD;
    let reads = 0;
    const cluster = clientOf(user, OLD, async () => {
      reads++;
      return secret;
    });
    // idempotent calls (each adds its own member), retried as campaign sends are: a command that meets the
    // connection ioredis closes after a refusal has no answer, and goes again like one in a failover
    const keys = [0, 1, 2].map((slot) => `${namespace}:{${slot}}:calls`);
    const outcomes = { ok: 0, failed: [] as unknown[] };
    let member = 0;
    const burst = () =>
      Promise.all(
        Array.from({ length: 30 }, (_, i) => {
          const key = keys[i % keys.length] as string;
          const id = String(member++);
          return redisCallsOf(cluster)
            .call("sadd", [key], () => cluster.sadd(key, id), { deadlineMs: 2_000, retryOn: "no-answer" })
            .then(
              () => outcomes.ok++,
              (error: unknown) => outcomes.failed.push(error),
            );
        }),
      );

    await burst();
    // ROTATE: the secret holds the new token and Redis accepts both
    secret = NEW;
    await user.addPassword(NEW);
    await burst();
    // SET: only the new token; connections already open stay authenticated
    await user.removePassword(OLD);
    await burst();
    // a failover or a node replacement: every connection is opened again, with the old token first
    await user.dropConnections(cluster);
    await burst();
    await burst();

    expect(outcomes.failed).toEqual([]);
    expect(outcomes.ok).toBe(150);
    const admin = connectCluster();
    cleanup.push(() => admin.disconnect());
    const counted = await Promise.all(keys.map((key) => admin.scard(key)));
    expect(counted.map(Number).reduce((a, b) => a + b, 0)).toBe(150);
    expect(reads).toBeGreaterThanOrEqual(1);
    expect(cluster.nodes("master").map((node) => node.options.password)).toEqual([NEW, NEW, NEW]);
  });

  it("leaves a refusal as it is when the secret still holds the refused password, reading it at most once a second", async () => {
    const namespace = uniqueNamespace();
    const user = await AclUser.create(`rot-${namespace}`, OLD);
    cleanup.push(() => user.remove());
    let reads = 0;
    const cluster = clientOf(user, OLD, async () => {
      reads++;
      return OLD;
    });
    const key = `${namespace}:k`;
    const incr = () =>
      redisCallsOf(cluster).call("incr", [key], () => cluster.incr(key), { deadlineMs: 2_000, retryOn: "not-run" });
    expect(await incr()).toBe(1);
    // the token changed without the secret (a misconfiguration, not a rotation)
    await user.addPassword(NEW);
    await user.removePassword(OLD);
    await user.dropConnections(cluster);
    const outcomes = [];
    const started = performance.now();
    for (let i = 0; i < 5; i++) outcomes.push(await incr().then(String, (e: unknown) => e));
    const seconds = (performance.now() - started) / 1000;
    // Redis's refusal as it is (not retried until the deadline); the calls just after it may instead meet
    // the connection ioredis closes after a refusal: none of them is counted, and the secret is read once
    expect(outcomes[0]).toBeInstanceOf(StoreReplyError);
    expect((outcomes[0] as StoreReplyError).code).toBe("WRONGPASS");
    for (const outcome of outcomes) expect(outcome).toBeInstanceOf(Error);
    // refused calls and the client's own reconnect attempts share the reads: one, then at most one a second
    expect(reads).toBeGreaterThanOrEqual(1);
    expect(reads).toBeLessThanOrEqual(1 + Math.ceil(seconds));
    const admin = connectCluster();
    cleanup.push(() => admin.disconnect());
    expect(await admin.get(key)).toBe("1");
  });
});
