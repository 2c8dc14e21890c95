// For the SDK's integration tests on the local Redis Cluster: a rule published as the server side publishes
// the policy.
import type { Cluster } from "ioredis";
import { RedisQuotaStore } from "../../../functions/adapters/redis-quota-store.ts";
import { setStoreClock, testClockQuotaLibrary } from "../../../test/support/quota-test-clock.ts";
import type { QuotaRule } from "../../src/protocol/index.ts";
import type { QuotaTransport } from "../../src/quotas.ts";
import { type RedisTransportOptions, redisTransport } from "../../src/transports/redis.ts";

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

/**
 * The direct transport on the test build of quota-sync, whose store clock is set to each call's `now` before
 * the call: the tests' fleets share one injected clock, and the store's time follows it as the real store's
 * follows the wall clock. The clock is set within the transport's timeout; a node that does not answer is
 * left to the call itself, which reports it as the transport does (StoreUnreachableError).
 */
export function testClockTransport(options: RedisTransportOptions & { redis: Cluster }): QuotaTransport {
  const namespace = options.namespace ?? "tg";
  const timeoutMs = options.timeoutMs ?? 500;
  const direct = redisTransport({ ...options, library: testClockQuotaLibrary });
  return {
    async sync(request, now) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        setStoreClock(options.redis, namespace, request.rule, request.group, now).catch(() => undefined),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, timeoutMs);
        }),
      ]);
      clearTimeout(timer);
      return direct.sync(request, now);
    },
  };
}
