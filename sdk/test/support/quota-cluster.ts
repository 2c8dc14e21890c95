// For the SDK's integration tests on the local Redis Cluster: a rule published as the server side publishes
// the policy.
import type { Cluster } from "ioredis";
import { RedisQuotaStore } from "../../../functions/adapters/redis-quota-store.ts";
import type { QuotaRule } from "../../src/protocol/index.ts";

/** `rule` in every slot group's cfg key of `namespace`, as the server side publishes the policy. */
export function publishRule(
  cluster: Cluster,
  namespace: string,
  name: string,
  rule: QuotaRule,
  version: string,
): Promise<void> {
  return new RedisQuotaStore(cluster, namespace)
    .publish(name, rule, version, rule.slotGroups, Date.now())
    .then(() => undefined);
}
