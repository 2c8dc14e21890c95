// The quota rules of every tenant written to the store, and those of a tenant taken out of the policy
// removed: each tenant namespace rules are written in is kept in an index, so a publication finds the
// namespaces the policy no longer names (whoever wrote them: another container, the CLI) and empties them.
// Without it, a removed tenant's direct clients would keep receiving allowances from rules nobody serves.
import type { QuotaRulesInService } from "./quota-sync-service.ts";

/** The store's index of the tenant namespaces that hold quota rules. */
export interface TenantIndex {
  namespaces(): Promise<string[]>;
  /** Indexes the namespace with the stamp of the policy writing its rules. */
  add(tenantNamespace: string, stamp: number): Promise<void>;
  /** Unless a policy newer than `stamp` indexed it again (a tenant added back). */
  remove(tenantNamespace: string, stamp: number): Promise<void>;
}

export interface TenantRulesPublication {
  index: TenantIndex;
  /** What writes one tenant namespace's rules (its QuotaSyncService), and removes those not given. */
  publisherOf(tenantNamespace: string): { publish(rules: QuotaRulesInService): Promise<void> };
  /** Told of a namespace whose write failed (the next publication writes it again); "" for the index. */
  onError?(tenantNamespace: string, error: unknown): void;
}

/**
 * Writes each tenant's rules (`tenants`: namespace -> the rules it syncs) and empties every indexed tenant
 * namespace that `tenants` lacks, stamped `stamp`. A namespace is indexed before its rules are written, and
 * leaves the index only once its rules are gone, so a failure midway leaves it for the next publication.
 */
export async function publishTenantRules(
  publication: TenantRulesPublication,
  tenants: ReadonlyMap<string, QuotaRulesInService>,
  stamp: number,
): Promise<{ removed: string[] }> {
  const { index, publisherOf, onError } = publication;
  const indexed = await index.namespaces().catch((error: unknown) => {
    onError?.("", error);
    return [] as string[];
  });
  const removed = indexed.filter((namespace) => !tenants.has(namespace));
  const attempt = async (namespace: string, write: () => Promise<void>) => {
    try {
      await write();
    } catch (error) {
      onError?.(namespace, error);
    }
  };
  const gone: string[] = [];
  await Promise.all([
    ...[...tenants].map(([namespace, rules]) =>
      attempt(namespace, async () => {
        await index.add(namespace, rules.stamp);
        await publisherOf(namespace).publish(rules);
      }),
    ),
    ...removed.map((namespace) =>
      attempt(namespace, async () => {
        await publisherOf(namespace).publish({ quotas: new Map(), stamp });
        await index.remove(namespace, stamp);
        gone.push(namespace);
      }),
    ),
  ]);
  return { removed: gone.sort() };
}
