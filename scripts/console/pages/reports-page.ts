// Campaign reports: the campaigns in the decision archive, and for one `tollgate campaign report`'s data
// (sent, capped and repeats by segment and cap), which the browser draws as a bar chart.
import { z } from "zod";
import { archivedCampaigns, campaignReport } from "../../archive-answers.ts";
import type { OpenArchive } from "../../archive-query.ts";
import { type ConsoleContext, openConsoleArchive } from "../console-context.ts";
import { type ConsolePage, route } from "../console-page.ts";

async function withArchive<T>(context: ConsoleContext, read: (archive: OpenArchive) => Promise<T>) {
  const archive = await openConsoleArchive(context);
  try {
    return await read(archive);
  } finally {
    archive.close();
  }
}

export const reportsPage: ConsolePage = {
  id: "reports",
  title: "Campaign reports",
  routes: [
    route({
      method: "GET",
      path: "",
      input: z.object({}),
      handle: (context) => withArchive(context, async (archive) => ({ campaigns: await archivedCampaigns(archive) })),
    }),
    route({
      method: "GET",
      path: "campaign",
      input: z.object({ campaign: z.string().min(1, "choose a campaign") }),
      handle: (context, { campaign }) => withArchive(context, (archive) => campaignReport(archive, campaign)),
    }),
  ],
};
