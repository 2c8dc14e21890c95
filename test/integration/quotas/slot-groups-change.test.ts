// slotGroups changed by the operator under running SDK instances, direct and over HTTP.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { RedisQuotaStore } from "../../../functions/adapters/redis-quota-store.ts";
import { publishQuotaRules } from "../../../functions/app/quota-actions.ts";
import { type Policy, parsePolicyText } from "../../../functions/core/capping/policy.ts";
import { QuotaSyncService } from "../../../functions/core/quotas/quota-sync-service.ts";
import { withLocalTenant } from "../../../scripts/local/local-principals.ts";
import { type SyncReply, slotGroupOf } from "../../../sdk/src/protocol/index.ts";
import { createQuotas } from "../../../sdk/src/quotas.ts";
import { redisTransport } from "../../../sdk/src/transports/redis.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

/**
 * A policy with one approximate quota rule "grp" of `max` per 1 s over `slotGroups` slot groups, synced by the
 * local tenant.
 */
const groupedRule = (version: string, slotGroups: number, max = 1000): Policy =>
  parsePolicyText(
    JSON.stringify(
      withLocalTenant({
        version,
        channels: ["push"],
        segments: [],
        default: { name: "rest", caps: {} },
        quotas: [{ name: "grp", mode: "approximate", limits: [{ window: "1s", max }], slotGroups }],
      }),
    ),
  );
/** A key of slot group 2 when a rule has 4. */
const groupTwoKey = Array.from({ length: 64 }, (_, i) => `tenant-${i}`).find((k) => slotGroupOf(k, 4) === 2) as string;

describe("review: slotGroups changed under running instances (review4 defects, fixed)", () => {
  it("an SDK instance syncing directly to Redis learns that the operator lowered slotGroups from 4 to 1 and max from 1000 to 10, whatever slot group its key was in", async () => {
    const namespace = uniqueNamespace();
    // the CLI's `quotas set --redis` path: the policy's rules written to Redis, stamped by the policy's write time
    await publishQuotaRules(cluster, namespace, groupedRule("v1", 4), Date.now() - 10_000);
    let now = Date.now();
    const quotas = createQuotas({
      transport: redisTransport({ redis: cluster, namespace, tenant: "local" }),
      clock: { now: () => now },
    });
    const rounds = async (n: number) => {
      for (let i = 0; i < n; i++) {
        now += 50;
        quotas.check("grp", groupTwoKey, 1);
        await quotas.sync();
      }
    };
    await rounds(5);
    expect(quotas.resolve("grp", groupTwoKey).rule.definition?.slotGroups).toBe(4);
    await publishQuotaRules(cluster, namespace, groupedRule("v2", 1, 10), Date.now());
    await rounds(25);
    const definition = quotas.resolve("grp", groupTwoKey).rule.definition;
    expect({ slotGroups: definition?.slotGroups, max: definition?.limits[0]?.max }).toEqual({ slotGroups: 1, max: 10 });
    await quotas.stop();
  });

  it("an SDK instance whose rule goes from 4 slot groups to 1 and back to 4 has every new sync applied, none answered duplicate (its usage would be dropped)", async () => {
    // POST /v1/quotas/sync's service, the body as JSON, one clock for the instance and the service
    const namespace = uniqueNamespace();
    let now = Date.now();
    let policy = groupedRule("v1", 4);
    const service = new QuotaSyncService({
      store: new RedisQuotaStore(cluster, namespace),
      rules: async () => ({ quotas: policy.quotas, stamp: now }),
      clock: { now: () => now },
    });
    const statuses: SyncReply["status"][] = [];
    const quotas = createQuotas({
      transport: {
        sync: async (request) => {
          const reply = await service.sync(JSON.parse(JSON.stringify(request)));
          statuses.push(reply.status);
          return reply;
        },
      },
      clock: { now: () => now },
    });
    const rounds = async (n: number) => {
      for (let i = 0; i < n; i++) {
        now += 50;
        quotas.check("grp", groupTwoKey, 1);
        await quotas.sync();
      }
    };
    await rounds(40);
    policy = groupedRule("v2", 1);
    await rounds(5);
    policy = groupedRule("v3", 4);
    await rounds(40);
    expect(quotas.resolve("grp", groupTwoKey).rule.definition?.slotGroups).toBe(4);
    expect(statuses.filter((status) => status === "duplicate")).toEqual([]);
    await quotas.stop();
  });
});
