// quota-sync.lua with seqs of 15 or more digits and instances that come and go.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import {
  type QuotaRule,
  type SyncEntry,
  type SyncRequest,
  slotGroupKeys,
  slotGroupPrefix,
} from "../../../sdk/src/protocol/index.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { TestClockQuotaStore } from "../../support/quota-test-clock.ts";
import { T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

describe("review: quota-sync.lua, large seqs and instance churn (review3 defects, fixed)", () => {
  const ruleOf = (mode: QuotaRule["mode"], max: number): QuotaRule => ({
    mode,
    leaseMs: mode === "strict" ? 50 : 1000,
    fallback: "share",
    slotGroups: 1,
    limits: [{ windowMs: 1000, max }],
  });
  const request = (instanceId: string, seq: number, entry: Partial<SyncEntry>): SyncRequest => ({
    instanceId,
    rule: "api",
    group: 0,
    seq,
    configVersion: "v1",
    entries: [{ key: "k", usage: [], refunds: [], offered: 0, want: 0, ...entry }],
  });
  async function storeWith(rule: QuotaRule) {
    const namespace = uniqueNamespace();
    const quotaStore = new TestClockQuotaStore(cluster, namespace);
    await quotaStore.publish("api", rule, "v1", 1, 1);
    return { quotaStore, namespace };
  }

  it("answers a replay of a seq of 15 or more digits (the schema allows up to 2^53 - 1) as a duplicate, and applies the next", async () => {
    for (const seq of [100_000_000_000_000, Number.MAX_SAFE_INTEGER - 1]) {
      const { quotaStore } = await storeWith(ruleOf("approximate", 100));
      const first = await quotaStore.sync(request("big-seq", seq, { usage: [[T0, 30]], offered: 30 }), T0);
      expect(first.status).toBe("applied");
      const again = await quotaStore.sync(request("big-seq", seq, { usage: [[T0, 30]], offered: 30 }), T0 + 1);
      expect(again.status).toBe("duplicate");
      expect(again.entries[0]?.used).toEqual(first.entries[0]?.used);
      expect((await quotaStore.sync(request("big-seq", seq + 1, {}), T0 + 2)).status).toBe("applied");
    }
  });

  for (const mode of ["approximate", "strict"] as const) {
    it(`${mode}: a key kept in use while 150 short-lived instances come and go keeps fields only for the instances still retained`, async () => {
      const { quotaStore, namespace } = await storeWith(ruleOf(mode, 1000));
      // one new instance every 2 s syncs the key twice and goes away (the key stays in use throughout)
      let t = T0;
      for (let i = 0; i < 150; i++) {
        t += 2_000;
        const usage: Array<[number, number]> = mode === "approximate" ? [[t, 1]] : [];
        await quotaStore.sync(request(`gone-${i}`, 1, { offered: 5, want: 5 }), t);
        await quotaStore.sync(request(`gone-${i}`, 2, { offered: 5, want: 5, usage }), t + 10);
      }
      // the instance set keeps max(W, 60 s) + 60 s of instances; a key's fields: a few per instance at
      // most (an instance per field in this layout), the ring's 22 slots and its fixed fields
      const retained = await cluster.zcard(slotGroupKeys(namespace, "api", 0).instances);
      expect(retained).toBeLessThanOrEqual(62);
      expect(await cluster.hlen(`${slotGroupPrefix(namespace, "api", 0)}:k:k`)).toBeLessThanOrEqual(40 + 3 * retained);
    }, 60_000);
  }
});
