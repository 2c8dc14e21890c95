// Builders for quota-sync calls against the real cluster: a store with a rule published, and the
// requests the SDK would send for rule "api", slot group 0.
import type { TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import type { QuotaRule, SyncEntry, SyncRequest } from "../../sdk/src/protocol/index.ts";
import { uniqueNamespace } from "./cluster.ts";
import { TestClockQuotaStore } from "./quota-test-clock.ts";

/**
 * A store in a namespace of its own with `rule` published as `name`, configuration version "v1", running the
 * test build of quota-sync: the store's clock is each call's `now` unless the test holds it (`storeNow`).
 */
export async function publishedQuotaStore(
  cluster: TollgateCluster,
  rule: QuotaRule,
  name = "api",
): Promise<TestClockQuotaStore> {
  const store = new TestClockQuotaStore(cluster, uniqueNamespace());
  await store.publish(name, rule, "v1", rule.slotGroups, 1);
  return store;
}

/** One key's entry: nothing used, refunded, offered or wanted unless `fields` says so. */
export function syncEntry(key: string, fields: Partial<SyncEntry> = {}): SyncEntry {
  return { key, usage: [], refunds: [], offered: 0, want: 0, ...fields };
}

/** A sync of rule "api", slot group 0. */
export function syncCall(instanceId: string, seq: number, entries: SyncEntry[], configVersion = "v1"): SyncRequest {
  return { instanceId, rule: "api", group: 0, seq, configVersion, entries };
}

export const strictRule = (limits: QuotaRule["limits"], leaseMs = 50): QuotaRule => ({
  mode: "strict",
  leaseMs,
  fallback: "share",
  slotGroups: 1,
  limits,
});

export const approximateRule = (limits: QuotaRule["limits"]): QuotaRule => ({
  mode: "approximate",
  leaseMs: 1000,
  fallback: "share",
  slotGroups: 1,
  limits,
});
