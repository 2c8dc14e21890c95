// `tollgate why` and `tollgate campaign report`: the decision archive (docs/archive.md) read with DuckDB.
import type { Command } from "commander";
import { policyInService } from "../../functions/app/operator-actions.ts";
import { DEFAULT_POLICY_KEY } from "../../functions/core/capping/policy.ts";
import { DEFAULT_ARCHIVE_PREFIX } from "../../functions/core/shared/decision-archive.ts";
import { campaignReport, campaignReportText, why, whyText } from "../archive-answers.ts";
import { openArchive } from "../archive-query.ts";
import { type AwsOptions, aws, required, withAws } from "./aws-options.ts";
import { integerIn } from "./option-values.ts";

type ArchiveOptions = AwsOptions & { bucket?: string; archiveBucket?: string; archivePrefix: string; days?: number };

function withArchive(command: Command): Command {
  return withAws(
    command
      .option("--bucket <name>", "the config bucket (the policy)")
      .option("--archive-bucket <name>", "the archive's bucket (the stack output ArchiveBucket; default: --bucket)")
      .option("--archive-prefix <prefix>", "the archive's prefix in the bucket", DEFAULT_ARCHIVE_PREFIX)
      .option("--days <n>", "read only the last N days' partitions (default: all)", integerIn(1, 3_660)),
  );
}

async function open(options: ArchiveOptions) {
  const { s3, local } = aws(options);
  const bucket = required(options.bucket, local?.bucket, "--bucket");
  const prefix = options.archivePrefix.endsWith("/") ? options.archivePrefix : `${options.archivePrefix}/`;
  const archive = await openArchive(
    { s3, bucket: options.archiveBucket ?? bucket, prefix },
    options.days === undefined ? {} : { sinceMs: Date.now() - options.days * 86_400_000 },
  );
  return { archive, s3, bucket };
}

export function addArchiveCommands(program: Command): void {
  withArchive(
    program
      .command("why")
      .description("why a user's latest send was capped or allowed: the caps, their windows and the sends in them")
      .requiredOption("--user <id>", "user ID", integerIn(0, 0xffff_ffff))
      .option("--campaign <id>", "the latest decision of this campaign")
      .option("--channel <name>", "the latest decision on this channel")
      .option("--policy-key <key>", "the policy's object key (its caps are explained)", DEFAULT_POLICY_KEY)
      .option("--json", "the answer as JSON"),
  ).action(
    async (
      options: ArchiveOptions & {
        user: number;
        campaign?: string;
        channel?: string;
        policyKey: string;
        json?: boolean;
      },
    ) => {
      const { archive, s3, bucket } = await open(options);
      try {
        // the policy in service names every cap of the user's segment; without one, the cap that bit
        const policy = await policyInService(s3, bucket, options.policyKey).catch(() => undefined);
        const question = {
          userId: options.user,
          ...(options.campaign === undefined ? {} : { campaignId: options.campaign }),
          ...(options.channel === undefined ? {} : { channel: options.channel }),
        };
        const answer = await why(archive, question, policy);
        console.log(options.json ? JSON.stringify(answer ?? null, null, 2) : whyText(answer, question));
      } finally {
        archive.close();
      }
    },
  );

  const campaign = program.commands.find((command) => command.name() === "campaign") ?? program.command("campaign");
  withArchive(
    campaign
      .command("report")
      .description("a campaign's sends: sent, capped and repeats by segment and cap, with a chart")
      .argument("<campaign>", "campaign ID")
      .option("--json", "the report as JSON"),
  ).action(async (campaignId: string, options: ArchiveOptions & { json?: boolean }) => {
    const { archive } = await open(options);
    try {
      const report = await campaignReport(archive, campaignId);
      console.log(options.json ? JSON.stringify(report, null, 2) : campaignReportText(report));
    } finally {
      archive.close();
    }
  });
}
