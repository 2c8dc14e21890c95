// No denial under the limit, on the real Redis Cluster through the direct transport: `ready()` brings a
// process its rules before the first request, and `decide` (the middleware's path) syncs a key that has no
// allowance before it denies, so a fresh process or key under its limit is never turned away.
import type { AddressInfo } from "node:net";
import express from "express";
import type { Cluster } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectCluster, uniqueNamespace } from "../../../test/support/cluster.ts";
import { StoreUnreachableError } from "../../src/errors.ts";
import { expressQuotas } from "../../src/middleware/express.ts";
import type { QuotaRule } from "../../src/protocol/index.ts";
import { createQuotas } from "../../src/quotas.ts";
import { redisTransport } from "../../src/transports/redis.ts";
import { publishRule } from "../support/quota-cluster.ts";
import { manualClock, neverScheduler } from "../support/quota-fixtures.ts";

let cluster: Cluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

const strict: QuotaRule = {
  mode: "strict",
  limits: [{ windowMs: 1_000, max: 40 }],
  leaseMs: 200,
  fallback: "deny",
  slotGroups: 1,
};

/** An Express app behind `expressQuotas` on loopback; resolves with its URL and a stop function. */
async function server(quotas: ReturnType<typeof createQuotas>) {
  const app = express();
  app.use(expressQuotas(quotas, { rule: "api", key: (req) => String(req.headers["x-api-key"]) }));
  app.get("/hello", (_req, res) => {
    res.json({ hello: "world" });
  });
  const listening = app.listen(0, "127.0.0.1");
  await new Promise((resolve) => listening.once("listening", resolve));
  return {
    url: `http://127.0.0.1:${(listening.address() as AddressInfo).port}/hello`,
    stop: () => new Promise((resolve) => listening.close(resolve)),
  };
}

describe("a fresh process", () => {
  it("after ready() its first request is admitted and carries the rule's limit and policy, not RateLimit-Limit: 0", async () => {
    // the first request of every process was a 429 with RateLimit-Limit: 0 and an empty RateLimit-Policy
    const namespace = uniqueNamespace();
    await publishRule(cluster, namespace, "api", strict, "v1");
    const quotas = createQuotas({ transport: redisTransport({ redis: cluster, namespace }) });
    expect(await quotas.ready({ rules: ["api"] })).toBe(true);
    expect(quotas.engine.rule("api")?.definition?.limits).toEqual(strict.limits);
    const app = await server(quotas.start());
    try {
      const response = await fetch(app.url, { headers: { "x-api-key": "tenant-1" } });
      expect({
        status: response.status,
        limit: response.headers.get("ratelimit-limit"),
        policy: response.headers.get("ratelimit-policy"),
      }).toEqual({ status: 200, limit: "40", policy: "40;w=1" });
    } finally {
      await app.stop();
      await quotas.stop();
    }
  });

  it("without ready(), the middleware's first request waits for its key's first sync and is admitted with the rule's limit", async () => {
    const namespace = uniqueNamespace();
    await publishRule(cluster, namespace, "api", strict, "v1");
    const quotas = createQuotas({ transport: redisTransport({ redis: cluster, namespace }) });
    const app = await server(quotas);
    try {
      const response = await fetch(app.url, { headers: { "x-api-key": "tenant-1" } });
      expect({ status: response.status, limit: response.headers.get("ratelimit-limit") }).toEqual({
        status: 200,
        limit: "40",
      });
    } finally {
      await app.stop();
      await quotas.stop();
    }
  });

  it("ready() resolves true for a rule the store does not have (answered: norule), and false within its bound when the store does not answer", async () => {
    const namespace = uniqueNamespace();
    const answered = createQuotas({ transport: redisTransport({ redis: cluster, namespace }) });
    expect(await answered.ready({ rules: ["missing"] })).toBe(true);
    const silent = createQuotas({
      transport: { sync: () => Promise.reject(new StoreUnreachableError("no store")) },
    });
    expect(await silent.ready({ rules: ["api"], timeoutMs: 50 })).toBe(false);
  });
});

describe("new keys under their limit", () => {
  it("8 new strict keys, each at half its limit for 3 s, are never denied (every miss synced before it is decided)", async () => {
    // 8 of 8 new strict keys got a 429 at half the limit: a key's first check had no allowance
    const namespace = uniqueNamespace();
    await publishRule(cluster, namespace, "api", strict, "v1");
    // the store dates syncs by its own clock (a caller's clock running ahead of it is held back), so the
    // requests are paced on the real clock: a manual one racing ahead would offer more than half the limit
    const start = Date.now();
    const quotas = createQuotas({
      transport: redisTransport({ redis: cluster, namespace }),
      scheduler: neverScheduler,
    });
    const keys = Array.from({ length: 8 }, (_, i) => `new-key-${i}`);
    const decisions: boolean[] = [];
    // at most 20 requests a second per key (half of 40), one every 50 ms or later, the loop's tick between them
    for (let step = 0; step < 60; step++) {
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, start + step * 50 - Date.now())));
      await quotas.sync();
      for (const key of keys) decisions.push((await quotas.decide("api", key)).allowed);
    }
    expect({ requests: decisions.length, denied: decisions.filter((allowed) => !allowed).length }).toEqual({
      requests: 480,
      denied: 0,
    });
    await quotas.stop();
  });

  it("requests waiting together that a short grant leaves without a token ask again within the wait, and are admitted", async () => {
    // a process joining with a burst of waiting requests got its share of what was left, twice, and denied the rest
    const namespace = uniqueNamespace();
    await publishRule(cluster, namespace, "api", strict, "v1");
    const transport = redisTransport({ redis: cluster, namespace });
    // another instance's demand makes its share of the key most of it: 20 of 40 granted, then reported spent
    const busy = { instanceId: "i-busy", rule: "api", group: 0, configVersion: "" };
    const granted = await transport.sync(
      { ...busy, seq: 1, entries: [{ key: "shared", usage: [], refunds: [], offered: 20, want: 20 }] },
      Date.now(),
    );
    expect(granted.entries[0]).toMatchObject({ tokens: 20 });
    const spent = {
      key: "shared",
      usage: [[granted.serverTime, 20]] as [number, number][],
      refunds: [],
      offered: 0,
      want: 0,
    };
    await transport.sync({ ...busy, seq: 2, entries: [spent] }, Date.now());
    // 15 requests at once on a new instance: room for 20 in the window, its share of that less than 15
    const joining = createQuotas({ transport, scheduler: neverScheduler });
    const burst = await Promise.all(Array.from({ length: 15 }, () => joining.decide("api", "shared")));
    expect(burst.filter((d) => !d.allowed).length).toBe(0);
    await joining.stop();
  });

  it("a strict key over its limit is still denied by decide: the store's full window is final, not waited for again", async () => {
    const namespace = uniqueNamespace();
    await publishRule(cluster, namespace, "api", strict, "v1");
    const time = manualClock(Date.now());
    const quotas = createQuotas({
      transport: redisTransport({ redis: cluster, namespace }),
      clock: time,
      scheduler: neverScheduler,
    });
    let admitted = 0;
    for (let i = 0; i < 100; i++) if ((await quotas.decide("api", "hot")).allowed) admitted++;
    expect(admitted).toBe(40);
    await quotas.stop();
  });
});
