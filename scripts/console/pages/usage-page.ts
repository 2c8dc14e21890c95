// The live usage page: what each window of a quota rule holds for a key now, read from Redis through the
// same read `tollgate quotas usage` makes (quotaUsage: a sync that reports nothing and reserves nothing).
import { z } from "zod";
import { quotaTenantNamespace, quotaUsage, readPolicy } from "../../../functions/app/quota-actions.ts";
import { withCluster } from "../../cli/redis-options.ts";
import { needed } from "../console-context.ts";
import { type ConsolePage, route } from "../console-page.ts";

export const usagePage: ConsolePage = {
  id: "usage",
  title: "Live usage",
  routes: [
    route({
      method: "GET",
      path: "",
      input: z.object({
        rule: z.string().min(1, "choose a rule"),
        key: z.string().min(1, "give a quota key"),
        tenant: z.string().optional(),
      }),
      handle: async (context, { rule, key, tenant }) => {
        const nodes = needed(context.redis.nodes, "--redis");
        const { policy } = await readPolicy(context.s3, context.bucket, context.policyKey);
        const namespace = quotaTenantNamespace(context.redis.namespace, policy, rule, tenant || undefined);
        const reply = await withCluster(nodes, context.redis, (cluster) =>
          quotaUsage(cluster, namespace, policy, rule, key),
        );
        const published = policy.quotas.get(rule)!.rule;
        const [entry] = reply.entries;
        return {
          rule,
          key,
          mode: published.mode,
          windows: published.limits.map((limit, i) => ({
            windowMs: limit.windowMs,
            max: limit.max,
            used: entry?.used[i] ?? 0,
          })),
          instances: reply.instances,
          readAt: Date.now(),
        };
      },
    }),
  ],
};
