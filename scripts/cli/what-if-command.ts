// `tollgate campaign what-if`: the campaign `campaign push` would send, decided now against the live caps in
// peek mode (nothing written): per segment allowed, capped by cap, repeats and deferred, and when the capped
// users become eligible (functions/app/campaign-what-if.ts).
import type { Command } from "commander";
import type { WhatIfReport, WhatIfSegment } from "../../functions/app/campaign-what-if.ts";
import { campaignWhatIfOn } from "../../functions/app/operator-actions.ts";
import { MAX_DEFER_MS } from "../../functions/core/capping/campaign-batch.ts";
import { DEFAULT_POLICY_KEY } from "../../functions/core/capping/policy.ts";
import { systemClock } from "../../functions/core/shared/clock.ts";
import { ValidationError } from "../../functions/core/shared/errors.ts";
import { type AwsOptions, aws, required, withAws } from "./aws-options.ts";
import { userIdsOf } from "./campaign-commands.ts";
import { integerIn } from "./option-values.ts";
import { type RedisOptions, withCluster, withRedis } from "./redis-options.ts";

type WhatIfOptions = AwsOptions &
  RedisOptions & {
    bucket?: string;
    policyKey: string;
    campaign: string;
    channel: string;
    range?: string;
    idsFile?: string;
    at?: number;
    exempt?: boolean;
    countExempt?: boolean;
    deferMaxMs?: number;
    eligibleSample: number;
    json?: boolean;
  };

export function addWhatIfCommand(program: Command): void {
  const campaign = program.commands.find((command) => command.name() === "campaign") ?? program.command("campaign");
  withRedis(
    withAws(
      campaign
        .command("what-if")
        .description("what `campaign push` would do to each user now, against the live caps (writes nothing)")
        .option("--bucket <name>", "the config bucket holding the policy and segments in service")
        .option("--policy-key <key>", "the policy's object key", DEFAULT_POLICY_KEY)
        .requiredOption("--campaign <id>", "campaign ID")
        .requiredOption("--channel <name>", "channel")
        .option("--range <from-to>", "user IDs FROM..TO")
        .option("--ids-file <file>", "file of user IDs")
        .option("--at <ms>", "send time, ms since the epoch (default: now)", integerIn(0, Number.MAX_SAFE_INTEGER))
        .option(
          "--defer-max-ms <ms>",
          "defer capped and quiet sends up to this long (the batch's defer.maxMs)",
          integerIn(0, MAX_DEFER_MS),
        )
        .option("--exempt", "skip the caps (transactional)")
        .option("--count-exempt", "with --exempt: count the sends anyway")
        .option(
          "--eligible-sample <n>",
          "capped users whose eligible time is read (an even sample past it; 0: none)",
          integerIn(0, 10_000_000),
          100_000,
        )
        .option("--json", "the report as JSON"),
    ),
  ).action(async (options: WhatIfOptions) => {
    const userIds = userIdsOf(options);
    const { s3, local } = aws(options);
    const bucket = required(options.bucket, local?.bucket, "--bucket");
    const nodes = options.redis ?? local?.redis;
    if (!nodes) throw new ValidationError("--redis", "required (or --local)");
    const report = await withCluster(nodes, options, (cluster) =>
      campaignWhatIfOn(
        { s3, bucket, cluster, namespace: options.namespace, policyKey: options.policyKey },
        {
          campaignId: options.campaign,
          channel: options.channel,
          userIds,
          ...(options.at === undefined ? {} : { at: options.at }),
          ...(options.exempt ? { exempt: true } : {}),
          ...(options.deferMaxMs === undefined ? {} : { defer: { maxMs: options.deferMaxMs } }),
          ...(options.countExempt ? { countExempt: true } : {}),
        },
        { clock: systemClock, eligibleSample: options.eligibleSample },
      ),
    );
    console.log(options.json ? JSON.stringify(report, null, 2) : whatIfText(report));
  });
}

const cell = (value: number | string, width: number) => String(value).padStart(width);

/** The report as a table per segment, the caps that bit, and each segment's eligible-time histogram. */
export function whatIfText(report: WhatIfReport): string {
  const name = Math.max(7, ...report.segments.map((s) => s.segment.length));
  const header = `${"segment".padEnd(name)}  ${cell("users", 9)}  ${cell("allowed", 9)}  ${cell("capped", 9)}  ${cell("repeats", 8)}  ${cell("deferred", 8)}  ${cell("held", 8)}`;
  const row = (label: string, s: Omit<WhatIfSegment, "segment">) =>
    `${label.padEnd(name)}  ${cell(s.users, 9)}  ${cell(s.allowed + s.exempt, 9)}  ${cell(s.capped, 9)}  ${cell(s.duplicate, 8)}  ${cell(s.deferred, 8)}  ${cell(s.quiet + s.dropped, 8)}`;
  const lines = [
    `what-if ${report.campaignId} on ${report.channel} at ${new Date(report.at).toISOString()} (policy ${report.policyVersion}): ${report.users} users, nothing written`,
    header,
  ];
  for (const s of report.segments) {
    lines.push(row(s.segment, s));
    for (const [cap, n] of Object.entries(s.cappedBy)) lines.push(`${"".padEnd(name)}    capped by ${cap}: ${n}`);
    const h = s.eligibleAt;
    if (h.read > 0) {
      const buckets = h.buckets.map((b) => `≤${b.label} ${b.users}`).join("  ");
      lines.push(
        `${"".padEnd(name)}    eligible again (${h.read} of ${h.of} capped read): ${buckets}  later ${h.later}  never ${h.never}`,
      );
    }
  }
  lines.push(row("total", report.total));
  lines.push(
    "allowed includes exempt sends; deferred: held by quiet hours or a cap until it admits them (--defer-max-ms); held: in quiet hours and not sent, or dropped past maxMs",
  );
  return lines.join("\n");
}
