// The rotation's cache side on a Redis Cluster of our own (the local stack's, the tests'): an ACL user on every
// node, as ElastiCache's RBAC user is on every node of the group. `>password` adds a password beside the
// ones the user has (ROTATE); `resetpass` then `>password` leaves that one alone (SET).
import type { Redis } from "ioredis";
import type { CacheCredentials } from "../core/shared/credential-rotation.ts";

export function aclCacheCredentials(options: {
  nodes: readonly Redis[];
  userName: string;
  authenticate: (password: string, userName?: string) => Promise<void>;
}): CacheCredentials {
  const each = async (...rules: string[]) => {
    for (const node of options.nodes) await node.call("ACL", "SETUSER", options.userName, ...rules);
  };
  return {
    acceptBoth: (_current, pending) => each(`>${pending}`),
    acceptOnly: (password) => each("resetpass", `>${password}`),
    authenticate: (password) => options.authenticate(password, options.userName),
  };
}
