// Each tenant's own Redis user for the direct transport (docs/tenants.md): an access string that reaches the
// tenant's quota keys only, runs Redis Functions (the quota library's
// FCALL) and the commands the quota script runs inside them, and what a cluster client needs to find its
// nodes. Functions run with the caller's rights, so a function called by a tenant's user touches that
// tenant's keys or fails (NOPERM); no tenant user may load or replace a library (the service loads them), so
// none can change the code another tenant's calls run. ElastiCache RBAC users (infra/cache-users.ts) get
// the same access string; locally, ACL users on every node.
import type { Redis } from "ioredis";
import { tenantQuotaKeyPattern } from "../../sdk/src/protocol/index.ts";

/**
 * The data commands lua/quota-sync/ runs (test/unit/quotas/tenant-access-string.test.ts holds the list to the
 * script): a function's commands are checked against its caller's rights.
 */
export const QUOTA_SCRIPT_COMMANDS = [
  "del",
  "hdel",
  "hget",
  "hgetall",
  "hlen",
  "hmget",
  "hset",
  "persist",
  "pexpire",
  "time",
  "zadd",
  "zcount",
  "zrangebyscore",
  "zrem",
] as const;

/** The commands a tenant's user may run: FCALL and its script's, and a cluster client's discovery and redirections. */
const TENANT_COMMANDS = [
  "+fcall",
  "+fcall_ro",
  ...QUOTA_SCRIPT_COMMANDS.map((command) => `+${command}`),
  "+ping",
  "+info",
  "+readonly",
  "+asking",
  "+cluster|slots",
  "+cluster|shards",
  "+cluster|info",
] as const;

/** The Redis user name of a tenant (ElastiCache: 1-40 characters, a letter first). */
export const tenantUserName = (tenantNamespace: string) => `tollgate-${tenantNamespace}`;

/** A tenant user's access string (ElastiCache RBAC syntax, which Redis ACL SETUSER takes too). */
export function tenantAccessString(namespace: string, tenantNamespace: string): string {
  return ["on", `~${tenantQuotaKeyPattern(namespace, tenantNamespace)}`, "-@all", ...TENANT_COMMANDS].join(" ");
}

export interface TenantRedisUser {
  /** The tenant's namespace (the policy's `namespace` of the tenant). */
  tenant: string;
  password: string;
}

/**
 * Creates (or resets) each tenant's ACL user on every node given: ACL users are per node, not replicated,
 * so the caller passes every primary and replica. The local counterpart of the CDK's RBAC user group.
 */
export async function setTenantAclUsers(
  nodes: readonly Redis[],
  namespace: string,
  users: readonly TenantRedisUser[],
): Promise<void> {
  for (const node of nodes) {
    for (const user of users) {
      const rules = tenantAccessString(namespace, user.tenant).split(" ");
      await node.call("ACL", "SETUSER", tenantUserName(user.tenant), "reset", ...rules, `>${user.password}`);
    }
  }
}

/** Removes the tenants' ACL users from every node given. */
export async function removeTenantAclUsers(nodes: readonly Redis[], tenants: readonly string[]): Promise<void> {
  for (const node of nodes) {
    for (const tenant of tenants) await node.call("ACL", "DELUSER", tenantUserName(tenant));
  }
}
