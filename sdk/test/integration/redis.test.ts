// The SDK against the real Redis Cluster through the direct transport: N instances sharing one key,
// idempotent resends, a primary without the library, an operator's change, and a stopped primary. Time is the
// instances' injected clock, which the store's clock follows (the test build, testClockTransport): no sleeps.
// The library test runs the service's own build, on the store's real clock.
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import calculateSlot from "cluster-key-slot";
import type { Cluster } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { quotaLibrary } from "../../../functions/adapters/lua-scripts.ts";
import { basePort, connectCluster, uniqueNamespace } from "../../../test/support/cluster.ts";
import { SyncRejectedError } from "../../src/errors.ts";
import { type QuotaRule, type SyncRequest, slotGroupPrefix } from "../../src/protocol/index.ts";
import { createQuotas, type Quotas } from "../../src/quotas.ts";
import { redisTransport } from "../../src/transports/redis.ts";
import { publishRule, testClockTransport } from "../support/quota-cluster.ts";
import { manualClock, maxInWindow } from "../support/quota-fixtures.ts";

let cluster: Cluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

const T0 = Date.UTC(2026, 10, 23, 10);

/** N instances with one clock, each offered `perStep` requests per 50 ms step; returns admissions per step time. */
async function run(options: {
  namespace: string;
  rule: QuotaRule;
  instances: number;
  perStep: (instance: number) => number;
  steps: number;
}) {
  const time = manualClock(T0);
  const fleet: Quotas[] = Array.from({ length: options.instances }, () =>
    createQuotas({ transport: testClockTransport({ redis: cluster, namespace: options.namespace }), clock: time }),
  );
  const admitted: number[] = [];
  for (let step = 0; step < options.steps; step++) {
    time.set(T0 + step * 50);
    await Promise.all(fleet.map((q) => q.sync()));
    fleet.forEach((quotas, i) => {
      for (let r = 0; r < options.perStep(i); r++) if (quotas.check("api", "shared").allowed) admitted.push(time.now());
    });
  }
  return admitted;
}

describe("N instances against the real script", () => {
  it("strict: 4 instances offered 10× the limit never admit more than max in any window, and use most of it", async () => {
    const namespace = uniqueNamespace();
    const rule: QuotaRule = {
      mode: "strict",
      limits: [{ windowMs: 1_000, max: 50 }],
      leaseMs: 100,
      fallback: "deny",
      slotGroups: 1,
    };
    await publishRule(cluster, namespace, "api", rule, "v1");
    // 10× the limit: 4 instances × 6.25 requests per 50 ms = 500/s against 50/s
    const admitted = await run({ namespace, rule, instances: 4, perStep: (i) => (i % 2 === 0 ? 6 : 7), steps: 100 });
    expect(maxInWindow(admitted, 1_000)).toBeLessThanOrEqual(50);
    // 5 s of steps: at most 5 × 50 could be admitted
    expect(admitted.length).toBeGreaterThanOrEqual(0.9 * 250);
  });

  it("approximate: skewed demand (one instance offered 5× the others), 2× the limit: within 10 % of max in every window", async () => {
    const namespace = uniqueNamespace();
    const rule: QuotaRule = {
      mode: "approximate",
      limits: [{ windowMs: 1_000, max: 100 }],
      leaseMs: 200,
      fallback: "share",
      slotGroups: 1,
    };
    await publishRule(cluster, namespace, "api", rule, "v1");
    // 200/s offered: 10 requests per 50 ms step, split 5:1.25:1.25:1.25 ≈ 6 + 2 + 1 + 1
    const admitted = await run({
      namespace,
      rule,
      instances: 4,
      perStep: (i) => [6, 2, 1, 1][i] as number,
      steps: 100,
    });
    expect(maxInWindow(admitted, 1_000)).toBeLessThanOrEqual(110);
    expect(admitted.length).toBeGreaterThanOrEqual(0.9 * 500);
  });
});

describe("direct transport", () => {
  const rule: QuotaRule = {
    mode: "approximate",
    limits: [{ windowMs: 1_000, max: 100 }],
    leaseMs: 200,
    fallback: "share",
    slotGroups: 1,
  };
  const request = (seq: number, count: number): SyncRequest => ({
    instanceId: "i-test",
    rule: "api",
    group: 0,
    seq,
    configVersion: "",
    entries: [{ key: "k", usage: [[T0, count]], refunds: [], offered: count, want: 0 }],
  });

  it("a resent request (same seq) is answered as a duplicate and counted once", async () => {
    const namespace = uniqueNamespace();
    await publishRule(cluster, namespace, "api", rule, "v1");
    const transport = testClockTransport({ redis: cluster, namespace });
    const first = await transport.sync(request(1, 7), T0);
    const again = await transport.sync(request(1, 7), T0 + 10);
    // the window holds the 7 and the allowance reserved for this instance, once
    const { allowance } = first.entries[0] as { allowance: number };
    expect(first).toMatchObject({
      status: "applied",
      configVersion: "v1",
      rule,
      entries: [{ key: "k", used: [7 + allowance] }],
    });
    expect(again).toMatchObject({ status: "duplicate", entries: [{ key: "k", allowance, used: [7 + allowance] }] });
  });

  it("loads quota-sync where a primary lacks it (a new cluster, a node added empty, FUNCTION FLUSH): the service's own library, shared", async () => {
    const namespace = uniqueNamespace();
    await publishRule(cluster, namespace, "api", rule, "v1");
    const transport = redisTransport({ redis: cluster, namespace });
    await transport.sync(request(1, 1), T0);
    // deleted wherever it is (a primary an earlier failover promoted may never have been sent it)
    await Promise.all(
      cluster.nodes("master").map((node) =>
        node.function("DELETE", quotaLibrary.name).catch((error: Error) => {
          if (!/Library not found/.test(error.message)) throw error;
        }),
      ),
    );
    const reply = await transport.sync(request(2, 2), T0 + 50);
    const { allowance } = reply.entries[0] as { allowance: number };
    expect(reply).toMatchObject({ status: "applied", entries: [{ used: [3 + allowance] }] });
    // the primary of the key's slot holds the service's library again, loaded by the SDK
    const owner = cluster.slots[calculateSlot(`${slotGroupPrefix(namespace, "api", 0)}:cfg`)]?.[0];
    const node = cluster.nodes("master").find((n) => `${n.options.host}:${n.options.port}` === owner);
    expect(await node?.function("LIST", "LIBRARYNAME", quotaLibrary.name)).toHaveLength(1);
  });

  it("an error reply proves Redis answered: a key of another type (WRONGTYPE) is a refused sync, not an unreachable store", async () => {
    const namespace = uniqueNamespace();
    await cluster.set(`${slotGroupPrefix(namespace, "api", 0)}:cfg`, "not a hash");
    const sync = redisTransport({ redis: cluster, namespace }).sync(request(1, 1), T0);
    await expect(sync).rejects.toBeInstanceOf(SyncRejectedError);
    await expect(sync).rejects.toThrow(/WRONGTYPE/);
  });

  it("an operator's change reaches an instance in its next sync", async () => {
    const namespace = uniqueNamespace();
    await publishRule(cluster, namespace, "api", rule, "v1");
    const time = manualClock(T0);
    const quotas = createQuotas({ transport: testClockTransport({ redis: cluster, namespace }), clock: time });
    quotas.resolve("api", "k");
    await quotas.sync();
    expect(quotas.check("api", "k")).toMatchObject({ limit: 100, policy: "100;w=1" });
    await publishRule(cluster, namespace, "api", { ...rule, limits: [{ windowMs: 2_000, max: 40 }] }, "v2");
    time.set(T0 + 50);
    await quotas.sync();
    expect(quotas.check("api", "k")).toMatchObject({ limit: 40, policy: "40;w=2" });
  });

  it("a rule the store does not have: no error, the fallback (unknownRule) applies", async () => {
    const quotas = createQuotas({ transport: redisTransport({ redis: cluster, namespace: uniqueNamespace() }) });
    expect((await quotas.checkFresh("missing", "k")).allowed).toBe(false);
  });
});

describe("degraded mode with a stopped primary", () => {
  /** The pid of the primary serving a slot group, from the pidfile scripts/redis-cluster.ts wrote. */
  async function primaryOf(namespace: string): Promise<{ pid: number; port: number }> {
    const slot = calculateSlot(`${slotGroupPrefix(namespace, "api", 0)}:cfg`);
    const shards = (await cluster.cluster("SLOTS")) as unknown as [number, number, [string, number]][];
    const shard = shards.find(([from, to]) => slot >= from && slot <= to);
    const port = shard![2][1];
    const pidfile = resolve(join(".local", "redis-cluster", String(basePort), String(port), "redis.pid"));
    return { pid: Number(readFileSync(pidfile, "utf8").trim()), port };
  }

  it("keeps the last allowance, then the safe share (never the whole limit); usage is reported when the node is back", async () => {
    const namespace = uniqueNamespace();
    const rule: QuotaRule = {
      mode: "approximate",
      limits: [
        { windowMs: 1_000, max: 100 },
        { windowMs: 5_000, max: 1_000 },
      ],
      leaseMs: 10_000,
      fallback: "share",
      slotGroups: 1,
    };
    await publishRule(cluster, namespace, "api", rule, "v1");
    const time = manualClock(T0);
    // the allowance each instance's last answered sync reserved (still counted in the store's windows)
    const reserved = new Map<string, number>();
    const direct = testClockTransport({ redis: cluster, namespace, timeoutMs: 200 });
    const transport: typeof direct = {
      async sync(request, now) {
        const reply = await direct.sync(request, now);
        const entry = reply.entries[0];
        if (entry?.mode === "approximate") reserved.set(request.instanceId, entry.allowance);
        return reply;
      },
    };
    // another instance has synced: the store counts 2 instances, so the safe share is 100 / 2
    const other = createQuotas({ transport, clock: time });
    other.resolve("api", "k");
    await other.sync();
    const quotas = createQuotas({ transport, clock: time, keepAllowanceMs: 1_000 });
    quotas.resolve("api", "k");
    await quotas.sync();
    // without demand each instance holds an allowance of 1; this one is then offered 20 (1 admitted), so
    // its next allowance is sized for that demand (2 × 20 + 1, within its share)
    let admittedBefore = countAdmitted(other, 1);
    await other.sync();
    admittedBefore += countAdmitted(quotas, 20);
    await quotas.sync();
    admittedBefore += countAdmitted(quotas, 5);
    expect(admittedBefore).toBe(7);

    const { pid } = await primaryOf(namespace);
    // SIGSTOP, not SIGKILL: the node is back in well under cluster-node-timeout, so no failover reshapes
    // the cluster the other tests share
    process.kill(pid, "SIGSTOP");
    let admittedWhileDown = 0;
    try {
      time.set(T0 + 50);
      await quotas.sync();
      admittedWhileDown += countAdmitted(quotas, 1_000);
      // past the keep period: the safe share, 50 per window minus what the window already holds
      time.set(T0 + 1_100);
      await quotas.sync();
      admittedWhileDown += countAdmitted(quotas, 1_000);
      expect(quotas.check("api", "k").allowed).toBe(false);
    } finally {
      process.kill(pid, "SIGCONT");
    }
    // what was kept (allowance) + one safe share: never the whole limit again on this instance
    expect(admittedWhileDown).toBeLessThanOrEqual(100);
    expect(admittedWhileDown).toBeGreaterThan(0);

    time.set(T0 + 1_150);
    await quotas.sync();
    await quotas.sync();
    const peek = await transport.sync(
      {
        instanceId: "i-peek",
        rule: "api",
        group: 0,
        seq: 1,
        configVersion: "v1",
        entries: [{ key: "k", usage: [], refunds: [], offered: 0, want: 0 }],
      },
      T0 + 1_150,
    );
    // what was admitted before the stop and during it, counted once (in the 5 s window), beside the
    // allowances the three instances' last syncs reserved
    const held = [...reserved.values()].reduce((sum, n) => sum + n, 0);
    expect(peek.entries[0]?.used[1]).toBe(admittedBefore + admittedWhileDown + held);
  });
});

function countAdmitted(quotas: Quotas, attempts: number): number {
  let admitted = 0;
  for (let i = 0; i < attempts; i++) if (quotas.check("api", "k").allowed) admitted++;
  return admitted;
}
