// The Quotas operator actions behind `tollgate quotas`: read the policy's rules, change one rule (the
// policy is validated whole, then uploaded), write the rules to Redis at once, and read a key's usage.
import type { S3Client } from "@aws-sdk/client-s3";
import type { Cluster } from "ioredis";
import type { SyncReply } from "../../sdk/src/protocol/index.ts";
import { slotGroupOf, tenantNamespace } from "../../sdk/src/protocol/index.ts";
import { RedisQuotaStore } from "../adapters/redis-quota-store.ts";
import { S3ObjectStore } from "../adapters/s3-object-store.ts";
import { DEFAULT_POLICY_KEY, type Policy, parsePolicyText } from "../core/capping/policy.ts";
import {
  editPolicy,
  ifQuotaRuleUnchanged,
  type PolicyEdit,
  withoutQuotaRule,
  withQuotaRule,
} from "../core/capping/policy-edits.ts";
import { QuotaSyncService, rulesStamp } from "../core/quotas/quota-sync-service.ts";
import { systemClock } from "../core/shared/clock.ts";
import { ValidationError } from "../core/shared/errors.ts";
import type { QuotaRuleDocument } from "../core/shared/quota-rules.ts";
import { audit } from "./audit.ts";

export async function readPolicy(s3: S3Client, bucket: string, key = DEFAULT_POLICY_KEY) {
  const text = new TextDecoder().decode(await new S3ObjectStore(s3, bucket).get(key));
  return { text, policy: parsePolicyText(text) };
}

/**
 * Adds or replaces the rule `rule.name` in the policy object with a new version, granted to the tenants named
 * in `grantTo` (their `quota-sync`), with compare-and-set (made again from the newer object when another edit
 * came first; nothing is uploaded when invalid) and an audit line. With `opened` (an editor's save: the rule as it
 * opened it, quotaRuleOpened's JSON, undefined for a new rule) it is refused with ChangedSinceOpenedError when
 * the rule changed since. Returns the policy, the one it replaced, and when S3 wrote it.
 */
export async function setQuotaRule(
  s3: S3Client,
  bucket: string,
  rule: QuotaRuleDocument,
  grantTo: readonly string[] = [],
  opened?: { rule: string | undefined },
): Promise<PolicyWritten> {
  const edit = withQuotaRule(rule, grantTo);
  const result = await written(
    s3,
    bucket,
    opened === undefined ? edit : ifQuotaRuleUnchanged(rule.name, opened.rule, edit),
  );
  audit({
    action: "quota-rule-set",
    rule: rule.name,
    previousVersion: result.previous?.version,
    version: result.policy.version,
    grantedTo: grantTo,
  });
  return result;
}

/**
 * Takes the rule `name` out of the policy object (compare-and-set, as setQuotaRule; `opened` as there), with an
 * audit line.
 */
export async function removeQuotaRule(
  s3: S3Client,
  bucket: string,
  name: string,
  opened?: { rule: string | undefined },
): Promise<PolicyWritten> {
  const edit = withoutQuotaRule(name);
  const result = await written(s3, bucket, opened === undefined ? edit : ifQuotaRuleUnchanged(name, opened.rule, edit));
  audit({
    action: "quota-rule-remove",
    rule: name,
    previousVersion: result.previous?.version,
    version: result.policy.version,
  });
  return result;
}

export interface PolicyWritten {
  policy: Policy;
  previous: Policy | undefined;
  /** When S3 wrote the object (its Last-Modified): the stamp rules written to Redis carry. */
  modifiedAt: number;
}

async function written(s3: S3Client, bucket: string, edit: PolicyEdit): Promise<PolicyWritten> {
  const store = new S3ObjectStore(s3, bucket);
  const { policy, previous } = await editPolicy(store, edit);
  return { policy, previous, modifiedAt: (await store.head(DEFAULT_POLICY_KEY)).modifiedAt };
}

/**
 * Writes every quota rule of `policy` to Redis now (what the check API does on its next sync), in the
 * namespace of each tenant that syncs it, stamped as a container reading the policy S3 wrote at
 * `modifiedAt` would stamp it, so containers still on the previous policy cannot overwrite it. Every tenant's
 * namespace is written, a tenant that syncs no rule too: a rule it no longer syncs is removed there.
 */
export async function publishQuotaRules(cluster: Cluster, namespace: string, policy: Policy, modifiedAt: number) {
  const stamp = rulesStamp(modifiedAt, Date.now());
  await Promise.all(
    policy.tenancy.list().map((tenant) => {
      const quotas = new Map([...policy.quotas].filter(([name]) => tenant.quotaRules.has(name)));
      return quotaService(cluster, tenantNamespace(namespace, tenant.namespace), policy).publish({ quotas, stamp });
    }),
  );
}

/**
 * The namespace of the tenant whose key an operator reads: the one named, or the only tenant that syncs
 * `rule`; a ValidationError naming --tenant otherwise.
 */
export function quotaTenantNamespace(namespace: string, policy: Policy, rule: string, tenant?: string): string {
  const syncing = policy.tenancy.list().filter((t) => t.quotaRules.has(rule));
  const chosen =
    tenant === undefined ? (syncing.length === 1 ? syncing[0] : undefined) : syncing.find((t) => t.name === tenant);
  if (!chosen) {
    const names = syncing.map((t) => t.name).join(", ") || "none";
    throw new ValidationError("--tenant", `name the tenant whose key to read (tenants syncing "${rule}": ${names})`);
  }
  return tenantNamespace(namespace, chosen.namespace);
}

/**
 * A key's windows as the sync script sees them, read with a sync that reports nothing (instance
 * `tollgate-cli`, which counts as an active instance of the slot group for 5 s). `used` is what clients
 * used or hold reserved (approximate allowances), without the allowance this read itself was given.
 */
export async function quotaUsage(
  cluster: Cluster,
  namespace: string,
  policy: Policy,
  rule: string,
  key: string,
): Promise<SyncReply> {
  const published = policy.quotas.get(rule);
  if (!published) throw new ValidationError("rule", `no quota rule "${rule}" in policy ${policy.version}`);
  // a read: the operator is not one more instance, and nothing is reserved for it
  return new RedisQuotaStore(cluster, namespace).read(
    {
      instanceId: "",
      rule,
      group: slotGroupOf(key, published.rule.slotGroups),
      seq: 0,
      configVersion: published.version,
      entries: [{ key, usage: [], refunds: [], offered: 0, want: 0 }],
    },
    Date.now(),
  );
}

function quotaService(cluster: Cluster, namespace: string, policy: Policy): QuotaSyncService {
  return new QuotaSyncService({
    store: new RedisQuotaStore(cluster, namespace),
    rules: async () => ({ quotas: policy.quotas, stamp: 0 }),
    clock: systemClock,
  });
}
