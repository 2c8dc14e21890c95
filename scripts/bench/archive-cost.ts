// The archive section: what archiving every decision costs the campaign pipeline, and what it loses. The
// same campaign to every user through the local stack with the decision archive off and on, alternating
// (off, on, off, on) in one run so both see the same machine, each on a fresh key namespace.
import { createAwsClients } from "../../functions/adapters/aws-clients.ts";
import { pushCampaign, uploadRules } from "../../functions/app/operator-actions.ts";
import { policyDocument, SEGMENTS, segmentOfUser, USERS } from "./campaign.ts";
import { startBenchStack } from "./stack.ts";
import { n, today } from "./tables.ts";

interface Run {
  archive: boolean;
  rate: number;
  archived: number;
  lost: number;
  failedRecords: number;
}

async function runOnce(archive: boolean, round: number): Promise<Run> {
  const stack = await startBenchStack({
    queuePrefix: `bench-archive-${round}`,
    namespace: `bench-archive-${round}`,
    environment: archive ? {} : { DECISION_ARCHIVE: "" },
  });
  try {
    const { endpoints } = stack;
    const { s3, sqs } = createAwsClients({ region: endpoints.region, endpoint: endpoints.awsEndpoint });
    const members: Record<string, number[]> = Object.fromEntries(SEGMENTS.map((name) => [name, []]));
    for (let id = 0; id < USERS; id++) members[SEGMENTS[segmentOfUser(id)] as string]?.push(id);
    await uploadRules(s3, endpoints.bucket, policyDocument(), members);
    const userIds = Array.from({ length: USERS }, (_, i) => i);
    const started = performance.now();
    await pushCampaign(sqs, endpoints.campaignQueueUrl, {
      campaignId: `bench-archive-${round}`,
      channel: "push",
      userIds,
    });
    // drained: every invocation wrote its decisions before it returned
    await stack.poller.drained(600_000);
    const seconds = (performance.now() - started) / 1000;
    const stats = stack.consumer.archive?.stats() ?? { archived: 0, lost: 0, pending: 0 };
    const run = { archive, rate: USERS / seconds, ...stats, failedRecords: stack.poller.stats.failedRecords };
    console.log(
      `archive ${archive ? "on " : "off"}: ${Math.round(run.rate)} users/s, ${run.archived} archived, ${run.lost} lost`,
    );
    return run;
  } finally {
    await stack.stop();
  }
}

export async function runArchiveCost(): Promise<string[]> {
  const runs: Run[] = [];
  for (const [round, archive] of [false, true, false, true].entries()) runs.push(await runOnce(archive, round));
  const mean = (archive: boolean) => {
    const rates = runs.filter((run) => run.archive === archive).map((run) => run.rate);
    return rates.reduce((a, b) => a + b, 0) / rates.length;
  };
  const [off, on] = [mean(false), mean(true)];
  const archivedRuns = runs.filter((run) => run.archive);
  return [
    `Measured ${today()} by \`npm run bench -- archive\` (BENCH_USERS=${USERS}): the pipeline section's campaign, ` +
      "run four times in one run, the decision archive off, on, off, on (on: gzipped NDJSON objects to the emulator's bucket, as the local stack writes them).",
    "",
    "| Figure | Value |",
    "|---|---|",
    `| Pipeline users/s, archive off (mean of 2) | ${n(off)} |`,
    `| Pipeline users/s, archive on (mean of 2) | ${n(on)}: ${(on / off).toFixed(2)}× the rate without |`,
    `| Each run, users/s | ${runs.map((run) => `${run.archive ? "on" : "off"} ${n(run.rate)}`).join(", ")} |`,
    `| Decisions archived / lost, archive on (each run) | ${archivedRuns.map((run) => `${n(run.archived)} / ${run.lost}`).join("; ")} |`,
    `| Failed records (all runs) | ${runs.reduce((sum, run) => sum + run.failedRecords, 0)} |`,
  ];
}
