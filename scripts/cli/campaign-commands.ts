// `tollgate campaign push`: a campaign's users, from a range or a file, onto the campaign queue as batch
// messages, once the campaign is checked against the policy in service (what the consumer would refuse is
// refused here, exit 1 with the reason).
import { readFileSync } from "node:fs";
import { SingleBar } from "cli-progress";
import type { Command } from "commander";
import { policyInService, pushCampaign } from "../../functions/app/operator-actions.ts";
import { DEFAULT_POLICY_KEY } from "../../functions/core/capping/policy.ts";
import { parseUserIdList } from "../../functions/core/capping/segment-builder.ts";
import { systemClock } from "../../functions/core/shared/clock.ts";
import { ValidationError } from "../../functions/core/shared/errors.ts";
import { MAX_USER_ID } from "../../functions/core/shared/send-fields.ts";
import { type AwsOptions, aws, required, withAws } from "./aws-options.ts";
import { integerIn } from "./option-values.ts";

/** User IDs from `--range A-B` or `--ids-file F`. */
export function userIdsOf(options: { range?: string; idsFile?: string }): number[] {
  if (options.range !== undefined) {
    const match = /^([0-9]+)-([0-9]+)$/.exec(options.range);
    const [from, to] = [Number(match?.[1]), Number(match?.[2])];
    if (!match || from > to || to > MAX_USER_ID)
      throw new ValidationError("--range", `expected FROM-TO with 0 <= FROM <= TO <= ${MAX_USER_ID}`);
    return Array.from({ length: to - from + 1 }, (_, i) => from + i);
  }
  if (options.idsFile !== undefined) return parseUserIdList(readFileSync(options.idsFile, "utf8"), options.idsFile);
  throw new ValidationError("--range", "give --range FROM-TO or --ids-file FILE");
}

export function addCampaignCommands(program: Command): void {
  withAws(
    program
      .command("campaign")
      .description("campaigns")
      .command("push")
      .description("put a campaign on the campaign queue as batch messages")
      .option("--queue-url <url>", "the campaign queue")
      .option("--bucket <name>", "the config bucket holding the policy in service")
      .option("--policy-key <key>", "the policy's object key", DEFAULT_POLICY_KEY)
      .requiredOption("--campaign <id>", "campaign ID")
      .requiredOption("--channel <name>", "channel")
      .option("--range <from-to>", "user IDs FROM..TO")
      .option("--ids-file <file>", "file of user IDs")
      .option("--payload <json>", "payload forwarded with every send")
      .option(
        "--at <ms>",
        "send time, ms since the epoch (default: when processed)",
        integerIn(0, Number.MAX_SAFE_INTEGER),
      )
      .option("--exempt", "skip the caps (transactional)")
      .option("--count-exempt", "with --exempt: count the sends anyway")
      .option("--per-message <n>", "user IDs per message", integerIn(1, 50_000), 10_000),
  ).action(
    async (
      options: AwsOptions & {
        queueUrl?: string;
        bucket?: string;
        policyKey: string;
        campaign: string;
        channel: string;
        range?: string;
        idsFile?: string;
        payload?: string;
        at?: number;
        exempt?: boolean;
        countExempt?: boolean;
        perMessage: number;
      },
    ) => {
      const userIds = userIdsOf(options);
      let payload: unknown;
      if (options.payload !== undefined) {
        try {
          payload = JSON.parse(options.payload);
        } catch {
          throw new ValidationError("--payload", "not valid JSON");
        }
      }
      const campaign = {
        campaignId: options.campaign,
        channel: options.channel,
        ...(payload === undefined ? {} : { payload }),
        ...(options.at === undefined ? {} : { at: options.at }),
        ...(options.exempt ? { exempt: true } : {}),
        ...(options.countExempt ? { countExempt: true } : {}),
      };
      const perMessage = options.perMessage;
      const { sqs, s3, local } = aws(options);
      const queueUrl = required(options.queueUrl, local?.campaignQueueUrl, "--queue-url");
      const bucket = required(options.bucket, local?.bucket, "--bucket");
      const policy = await policyInService(s3, bucket, options.policyKey);
      const bar = process.stderr.isTTY ? new SingleBar({ format: "pushing [{bar}] {value}/{total} users" }) : undefined;
      bar?.start(userIds.length, 0);
      let messages: number;
      try {
        // pushCampaign validates the campaign's fields, then against the policy, before it sends anything
        messages = await pushCampaign(
          sqs,
          queueUrl,
          { ...campaign, userIds, usersPerMessage: perMessage, onProgress: (sent) => bar?.update(sent) },
          { policy, clock: systemClock },
        );
      } finally {
        bar?.stop();
      }
      console.log(`pushed campaign ${campaign.campaignId}: ${userIds.length} users in ${messages} messages`);
    },
  );
}
