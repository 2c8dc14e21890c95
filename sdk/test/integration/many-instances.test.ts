// Each test guards against a defect once found here, fixed since; its comment quotes the contract it broke.
// A quota key synced by many instances over time (a Lambda fleet: every execution environment is a
// new instance id), against the real script through the direct transport. Time is the callers' clock, which
// the store's clock follows (the test build, testClockTransport and TestClockQuotaStore).
import type { Cluster } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisQuotaStore } from "../../../functions/adapters/redis-quota-store.ts";
import { connectCluster, uniqueNamespace } from "../../../test/support/cluster.ts";
import { TestClockQuotaStore } from "../../../test/support/quota-test-clock.ts";
import { type QuotaRule, type SyncEntry, type SyncRequest, slotGroupPrefix } from "../../src/protocol/index.ts";
import { createQuotas } from "../../src/quotas.ts";
import { testClockTransport } from "../support/quota-cluster.ts";
import { neverScheduler } from "../support/quota-fixtures.ts";

let cluster: Cluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

// pinned: the `now` every sync below is given, and the store's clock with it
const T0 = Date.UTC(2026, 10, 27, 7, 30);

function entry(key: string, fields: Partial<SyncEntry> = {}): SyncEntry {
  return { key, usage: [], refunds: [], offered: 0, want: 0, ...fields };
}

function request(instanceId: string, seq: number, entries: SyncEntry[]): SyncRequest {
  return { instanceId, rule: "pay", group: 0, seq, configVersion: "v1", entries };
}

/** `count` instances, each new, sync `key` once at `at` (a fleet that scaled out, then was reclaimed). */
async function manyInstances(namespace: string, key: string, count: number, at: number): Promise<void> {
  const direct = testClockTransport({ redis: cluster, namespace, timeoutMs: 10_000 });
  for (let from = 0; from < count; from += 500) {
    await Promise.all(
      Array.from({ length: Math.min(500, count - from) }, (_, i) =>
        direct.sync(request(`env-${from + i}`, 1, [entry(key, { offered: 1 })]), at),
      ),
    );
    // the key's TTL (its longest window + 2 s) runs in real time while these syncs' time stands still: kept,
    // so every instance's field is there however long the host takes for them
    await cluster.persist(`${slotGroupPrefix(namespace, "pay", 0)}:k:${key}`);
  }
}

const pay: QuotaRule = {
  mode: "strict",
  limits: [{ windowMs: 1_000, max: 100 }],
  leaseMs: 400,
  fallback: "deny",
  slotGroups: 1,
};

describe("a key many instances synced", () => {
  // Contract: DECISIONS, "Windows as bucket rings": "A key's instance fields are bounded: when an instance
  // new to the key makes it hold more than 2 × the group's active instances + 10 of them, the fields of
  // instances silent longer than the seq records live (max(W, 60 s) + 60 s ...) are removed." The script
  // removes them with one HDEL of unpack(gone): past Lua's ~8,000 results that is "too many results to
  // unpack", raised after the call has recorded its seq and written its keys. Nothing is ever removed, and
  // every new instance's first sync of the key is refused from then on.
  it("9,000 instances synced a key and went away: a new instance's sync of it succeeds and their fields are removed", async () => {
    const namespace = uniqueNamespace();
    await new RedisQuotaStore(cluster, namespace).publish("pay", pay, "v1", 1, Date.now());
    await manyInstances(namespace, "hot", 9_000, T0 - 200_000);
    const keyName = `${slotGroupPrefix(namespace, "pay", 0)}:k:hot`;
    expect(await cluster.hlen(keyName)).toBeGreaterThan(9_000);
    const direct = testClockTransport({ redis: cluster, namespace });
    const reply = await direct.sync(request("i-new", 1, [entry("hot", { offered: 1, want: 1 })]), T0).then(
      (r) => r.status,
      (error: Error) => error.message,
    );
    expect(reply).toBe("applied");
    expect(await cluster.hlen(keyName)).toBeLessThan(100);
  });

  // Contract: sdk/src/protocol/wire.ts, "Retries": "An instance that gives up on one may send its approximate usage
  // again under a new seq ..., but must drop its refunds and strict spent tokens (taking them off their
  // grant twice could over-admit)." A sync the store answered with an error is given back to its keys and
  // sent under a new seq, refunds included; here the error came after the script had applied the first key
  // (the failure above, on the request's second key), so the refund is taken off its grant's bucket twice,
  // and the tokens another instance holds in that bucket stop counting.
  it("strict: a refund the store applied before answering with an error is not taken off its grant again", async () => {
    const namespace = uniqueNamespace();
    await new RedisQuotaStore(cluster, namespace).publish("pay", pay, "v1", 1, Date.now());
    await manyInstances(namespace, "hot", 9_000, T0 - 200_000);
    const direct = testClockTransport({ redis: cluster, namespace });
    let now = T0;
    const time = { now: () => now };
    const x = createQuotas({ transport: direct, clock: time, scheduler: neverScheduler });
    const countA = async () =>
      (await new TestClockQuotaStore(cluster, namespace).read(request("", 0, [entry("a")]), now)).entries[0]!.used[0];
    // X, offered 40 per interval on "a", is granted 1 token, then about 25 at T0 + 50 (lease 400)
    for (const at of [T0, T0 + 50]) {
      now = at;
      for (let i = 0; i < 40; i++) x.check("pay", "a");
      await x.sync();
    }
    const held = x.check("pay", "a", 0).remaining;
    expect(held).toBeGreaterThan(10);
    // Y, another instance, is granted 30 tokens of "a" in the same bucket and holds them (lease to T0 + 490)
    now = T0 + 90;
    const y = await direct.sync(request("i-y", 1, [entry("a", { offered: 1_000, want: 30 })]), now);
    expect(y.entries[0]?.mode === "strict" && y.entries[0].tokens).toBe(30);
    // X's quiet rounds; at T0 + 400 its grant ends within an interval: its refund goes out, with "hot"
    for (let at = T0 + 100; at < T0 + 400; at += 50) {
      now = at;
      await x.sync();
    }
    expect(await countA()).toBeGreaterThanOrEqual(30 + held);
    now = T0 + 400;
    x.check("pay", "hot");
    await x.sync();
    // the first attempt applied X's refund (and answered with an error): Y's 30 still count
    const afterFirst = await countA();
    expect(afterFirst).toBeGreaterThanOrEqual(30);
    expect(afterFirst).toBeLessThan(30 + held);
    now = T0 + 450;
    await x.sync();
    const afterRetry = (await countA()) as number;
    // Y's 30 tokens, held until T0 + 490, still count after X's retry (they came out with X's refund taken
    // twice: the store would grant them again while Y may still spend them)
    expect(afterRetry).toBeGreaterThanOrEqual(30);
  });
});
