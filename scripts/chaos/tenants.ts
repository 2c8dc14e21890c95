// The two tenants of the harness's tenant scenarios (docs/chaos.md, "Two tenants"): A and B sync the same
// rule names with the same key, each on both transports as itself: over HTTP signed with its own local
// credential, straight to Redis as its own ACL user. The single-tenant scenarios act as the local tenant.
import { tenantAccessString, tenantUserName } from "../../functions/app/tenant-redis-users.ts";
import type { TenantDocument } from "../../functions/core/shared/tenants.ts";
import { slotGroupKeys, tenantNamespace } from "../../sdk/src/protocol/index.ts";
import type { LocalCredential } from "../local/sigv4-verify.ts";

/** The deployment's key namespace in the harness (the QuotaSync function's default KEY_NAMESPACE). */
export const CHAOS_NAMESPACE = "tg";

export interface ChaosTenant {
  /** The policy's tenant name (what `quotas set --tenant` grants to). */
  name: string;
  /** Its namespace: its keys are `tg:t:<namespace>:...`. */
  namespace: string;
  /** The key its HTTP instances sign with (the QuotaSync function's local Function URL accepts it). */
  credential: LocalCredential;
  /** Its Redis user on every node of the harness's cluster. */
  redis: { username: string; password: string };
}

function chaosTenant(letter: "a" | "b"): ChaosTenant {
  return {
    name: `tenant-${letter}`,
    namespace: letter,
    credential: {
      accessKeyId: `chaos-tenant-${letter}`,
      secretAccessKey: `chaos-secret-of-${letter}`,
      principalArn: `arn:aws:iam::000000000000:user/chaos-tenant-${letter}`,
    },
    redis: { username: tenantUserName(letter), password: `chaos-redis-password-of-${letter}` },
  };
}

/** A (the one with a hostile instance, and whose grant a nemesis revokes) and B (the one watched for crossing). */
export const TENANT_A = chaosTenant("a");
export const TENANT_B = chaosTenant("b");
export const CHAOS_TENANTS: readonly ChaosTenant[] = [TENANT_A, TENANT_B];

/** The tenant as the policy names it before any rule is granted (setRule adds `quota-sync` and the rule). */
export function tenantDocument(tenant: ChaosTenant): TenantDocument {
  return {
    name: tenant.name,
    namespace: tenant.namespace,
    principals: [tenant.credential.principalArn],
    operations: ["limit"],
  };
}

/** `ACL SETUSER` arguments of the tenant's user: the access string the CDK gives its ElastiCache user. */
export function aclSetUserArgs(tenant: ChaosTenant): string[] {
  return [
    "ACL",
    "SETUSER",
    tenant.redis.username,
    "reset",
    ...tenantAccessString(CHAOS_NAMESPACE, tenant.namespace).split(" "),
    `>${tenant.redis.password}`,
  ];
}

/** What every key of `tenant` starts with: `tg:t:<namespace>:`. */
export function tenantKeyPrefix(tenant: ChaosTenant): string {
  return `${tenantNamespace(CHAOS_NAMESPACE, tenant.namespace)}:`;
}

/**
 * The keys a tenant's own instances make: each rule's configuration, sequences, instances and the one key
 * the load checks (KEY), and the namespace's rule index. Anything else in its namespace came from elsewhere.
 */
export function isOwnKey(tenant: ChaosTenant, key: string, loadKey: string): boolean {
  const prefix = tenantKeyPrefix(tenant);
  if (!key.startsWith(prefix)) return false;
  const rest = key.slice(prefix.length);
  return rest === "q:rules" || new RegExp(`^q:\\{[A-Za-z0-9_.:-]+\\.\\d+\\}:(cfg|seq|inst|k:${loadKey})$`).test(rest);
}

/** The configuration key of `rule` in the tenant's namespace (slot group 0). */
export function tenantConfigKey(tenant: ChaosTenant, rule: string): string {
  return slotGroupKeys(tenantNamespace(CHAOS_NAMESPACE, tenant.namespace), rule, 0).config;
}
