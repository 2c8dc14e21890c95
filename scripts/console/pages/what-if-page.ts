// The campaign what-if: `tollgate campaign what-if`'s answer (per segment allowed, capped by cap, repeats,
// deferred, and when the capped users are eligible again), decided against the live caps in peek mode by
// the same core, writing nothing.
import { z } from "zod";
import { campaignWhatIfOn } from "../../../functions/app/operator-actions.ts";
import { systemClock } from "../../../functions/core/shared/clock.ts";
import { MAX_USER_ID } from "../../../functions/core/shared/send-fields.ts";
import { withCluster } from "../../cli/redis-options.ts";
import { whatIfText } from "../../cli/what-if-command.ts";
import { needed } from "../console-context.ts";
import { type ConsolePage, integerText, route } from "../console-page.ts";

/** The most users one request decides (the CLI takes any number). */
const MAX_USERS = 10_000_000;

const range = z
  .string()
  .regex(/^[0-9]{1,10}-[0-9]{1,10}$/, "expected FROM-TO, e.g. 0-999999")
  .transform((text) => text.split("-").map(Number) as [number, number])
  .refine(([from, to]) => from <= to && to <= MAX_USER_ID, `expected 0 <= FROM <= TO <= ${MAX_USER_ID}`)
  .refine(([from, to]) => to - from < MAX_USERS, `at most ${MAX_USERS} users`);

export const whatIfPage: ConsolePage = {
  id: "what-if",
  title: "What-if",
  routes: [
    route({
      method: "GET",
      path: "",
      input: z.object({
        campaign: z.string().min(1, "give a campaign ID"),
        channel: z.string().min(1, "give a channel"),
        range,
        at: integerText(0, Number.MAX_SAFE_INTEGER).optional(),
        eligibleSample: integerText(0, MAX_USERS).optional(),
      }),
      handle: async (context, { campaign, channel, range: [from, to], at, eligibleSample }) => {
        const nodes = needed(context.redis.nodes, "--redis");
        const userIds = Array.from({ length: to - from + 1 }, (_, i) => from + i);
        const report = await withCluster(nodes, context.redis, (cluster) =>
          campaignWhatIfOn(
            {
              s3: context.s3,
              bucket: context.bucket,
              cluster,
              namespace: context.redis.namespace,
              policyKey: context.policyKey,
            },
            { campaignId: campaign, channel, userIds, ...(at === undefined ? {} : { at }) },
            { clock: systemClock, eligibleSample: eligibleSample ?? 100_000 },
          ),
        );
        return { report, text: whatIfText(report) };
      },
    }),
  ],
};
