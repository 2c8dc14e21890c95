// The why-lookup: `tollgate why`'s answer (the decision, the caps of its segment, the sends in each window),
// from the decision archive read with DuckDB, as the CLI reads it.
import { z } from "zod";
import { policyInService } from "../../../functions/app/operator-actions.ts";
import { why, whyText } from "../../archive-answers.ts";
import { openConsoleArchive } from "../console-context.ts";
import { type ConsolePage, integerText, route } from "../console-page.ts";

export const whyPage: ConsolePage = {
  id: "why",
  title: "Why",
  routes: [
    route({
      method: "GET",
      path: "",
      input: z.object({
        user: integerText(0, 0xffff_ffff),
        campaign: z.string().optional(),
        channel: z.string().optional(),
      }),
      handle: async (context, { user, campaign, channel }) => {
        const archive = await openConsoleArchive(context);
        try {
          const policy = await policyInService(context.s3, context.bucket, context.policyKey).catch(() => undefined);
          const question = {
            userId: user,
            ...(campaign ? { campaignId: campaign } : {}),
            ...(channel ? { channel } : {}),
          };
          const answer = await why(archive, question, policy);
          return { answer: answer ?? null, text: whyText(answer, question) };
        } finally {
          archive.close();
        }
      },
    }),
  ],
};
