// What `decide`'s wait (up to 6 syncs within `waitMs`) may not do, on the real Redis Cluster through the
// direct transport: take a window's tokens from the other instances for a request it will deny anyway,
// ask a store that answered with an error again and again, or leave a joining instance's waiters denied
// while the window has room for them. Written from docs/quotas.md's contract.
import { Cluster, Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { clusterPorts, connectCluster, uniqueNamespace } from "../../../test/support/cluster.ts";
import type { QuotaRule, SyncReply, SyncRequest } from "../../src/protocol/index.ts";
import { createQuotas, type QuotaTransport } from "../../src/quotas.ts";
import { redisTransport } from "../../src/transports/redis.ts";
import { publishRule } from "../support/quota-cluster.ts";
import { neverScheduler } from "../support/quota-fixtures.ts";

let cluster: Cluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});
const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step();
});

const strict: QuotaRule = {
  mode: "strict",
  limits: [{ windowMs: 1_000, max: 40 }],
  leaseMs: 200,
  fallback: "deny",
  slotGroups: 1,
};

/** `inner`, with every request it was given kept (what each call asked for), and its error replies counted. */
function recorded(inner: QuotaTransport) {
  const requests: SyncRequest[] = [];
  let errors = 0;
  const transport: QuotaTransport = {
    async sync(request: SyncRequest, now: number): Promise<SyncReply> {
      requests.push(structuredClone(request));
      try {
        return await inner.sync(request, now);
      } catch (error) {
        errors++;
        throw error;
      }
    },
  };
  return { transport, requests, errors: () => errors };
}

describe("decide's wait leaves the window to the other instances", () => {
  // each of 6 syncs granted a part of what was left to a request over the limit, which then denied holding all 40
  it("a request costing more than the limit is denied without taking the window: another instance's request of 1 is admitted", async () => {
    const namespace = uniqueNamespace();
    await publishRule(cluster, namespace, "api", strict, "v1");
    const fleet = Array.from({ length: 2 }, () =>
      createQuotas({ transport: redisTransport({ redis: cluster, namespace }), scheduler: neverScheduler }),
    );
    const [big, small] = fleet as [ReturnType<typeof createQuotas>, ReturnType<typeof createQuotas>];
    for (const quotas of fleet) expect(await quotas.ready({ rules: ["api"] })).toBe(true);
    const over = await big.decide("api", "shared", 41);
    const one = await small.decide("api", "shared", 1);
    expect({ over: over.allowed, one: one.allowed }).toEqual({ over: false, one: true });
    for (const quotas of fleet) await quotas.stop();
  });
});

describe("decide's wait and a store that answered with an error", () => {
  // an error reply (NOPERM, OOM, a script error) kept the wait going: 6 calls for one request
  it("a sync refused by the store (NOPERM) ends decide's wait: one call for one request, and the request denied", async () => {
    const namespace = uniqueNamespace();
    await publishRule(cluster, namespace, "api", strict, "v1");
    const name = `nofcall-${namespace}`;
    const nodes = clusterPorts.map((port) => new Redis({ host: "127.0.0.1", port }));
    cleanup.push(() => {
      for (const node of nodes) node.disconnect();
    });
    const each = (...command: [string, ...string[]]) => Promise.all(nodes.map((node) => node.call(...command)));
    // every command but the function calls the sync is made of: each sync is answered NOPERM
    await each("ACL", "SETUSER", name, "reset", "on", ">pw", "~*", "&*", "+@all", "-fcall", "-fcall_ro");
    cleanup.push(() => each("ACL", "DELUSER", name));
    const refused = new Cluster(
      clusterPorts.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })),
      { redisOptions: { username: name, password: "pw" } },
    );
    refused.on("error", () => {});
    cleanup.push(() => refused.disconnect());
    const calls = recorded(redisTransport({ redis: refused, namespace }));
    const quotas = createQuotas({ transport: calls.transport, scheduler: neverScheduler, onError: () => {} });
    const decision = await quotas.decide("api", "k");
    expect({ allowed: decision.allowed, calls: calls.requests.length, refused: calls.errors() }).toEqual({
      allowed: false,
      calls: 1,
      refused: 1,
    });
  });
});

describe("a joining instance among busy ones", () => {
  // the short-grant case of 7fa93ca with more instances: each reply grants the joining instance its part of
  // the key's recent demand, which 6 busy instances keep small, so 6 syncs may bring fewer than its waiters
  it("20 requests waiting together on a joining instance, 6 busy instances' demand on the key and 30 of 40 left, are all admitted", async () => {
    const namespace = uniqueNamespace();
    await publishRule(cluster, namespace, "api", strict, "v1");
    const transport = redisTransport({ redis: cluster, namespace });
    // 6 busy instances, each offered 50 (far above their part) and granted and spending 10 in all
    let spentSoFar = 0;
    for (let i = 0; i < 6; i++) {
      const busy = { instanceId: `i-busy-${i}`, rule: "api", group: 0, configVersion: "" };
      const want = i < 5 ? 2 : 0;
      const granted = await transport.sync(
        { ...busy, seq: 1, entries: [{ key: "shared", usage: [], refunds: [], offered: 50, want }] },
        Date.now(),
      );
      const tokens = granted.entries[0]?.mode === "strict" ? granted.entries[0].tokens : 0;
      spentSoFar += tokens;
      const usage: [number, number][] = tokens > 0 ? [[granted.serverTime, tokens]] : [];
      await transport.sync(
        { ...busy, seq: 2, entries: [{ key: "shared", usage, refunds: [], offered: 0, want: 0 }] },
        Date.now(),
      );
    }
    expect(spentSoFar).toBe(10);
    const joining = createQuotas({ transport, scheduler: neverScheduler });
    expect(await joining.ready({ rules: ["api"] })).toBe(true);
    const burst = await Promise.all(Array.from({ length: 20 }, () => joining.decide("api", "shared")));
    expect(burst.filter((d) => !d.allowed).length).toBe(0);
    await joining.stop();
  });
});
