// The archive section: what archiving every decision costs the campaign pipeline, and what it loses. The
// same campaign to every user through the local stack with the decision archive off and on, alternating
// in one run (off, then on between two offs, three times) so both see the same machine, each on a fresh key
// namespace; each "on" is compared with the "off"s either side of it (a shared machine's load moves single
// runs by tens of percent).
import { ListObjectsV2Command, type S3Client } from "@aws-sdk/client-s3";
import { createAwsClients } from "../../functions/adapters/aws-clients.ts";
import { pushCampaign, uploadRules } from "../../functions/app/operator-actions.ts";
import { DEFAULT_ARCHIVE_PREFIX } from "../../functions/core/shared/decision-archive.ts";
import { policyDocument, SEGMENTS, segmentOfUser, USERS } from "./campaign.ts";
import { startBenchStack } from "./stack.ts";
import { n, today } from "./tables.ts";

interface Run {
  archive: boolean;
  rate: number;
  archived: number;
  lost: number;
  failedRecords: number;
  /** The archive's objects in the bucket (gzipped). */
  storedBytes: number;
  /** The records' summed time building archive lines, and their summed time in all. */
  archiveMs: number;
  recordMs: number;
}

/** A first run warms the cluster and the JIT (not counted), then off and on in turn, each "on" between two "off"s. */
const ROUNDS = [false, false, true, false, true, false, true, false];

async function storedBytes(s3: S3Client, bucket: string): Promise<number> {
  let bytes = 0;
  let token: string | undefined;
  do {
    const page = await s3.send(
      new ListObjectsV2Command({ Bucket: bucket, Prefix: DEFAULT_ARCHIVE_PREFIX, ContinuationToken: token }),
    );
    for (const object of page.Contents ?? []) bytes += object.Size ?? 0;
    token = page.NextContinuationToken;
  } while (token);
  return bytes;
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2
    ? (sorted[middle] as number)
    : ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2;
};

async function runOnce(archive: boolean, round: number): Promise<Run> {
  let archiveMs = 0;
  let recordMs = 0;
  const stack = await startBenchStack({
    queuePrefix: `bench-archive-${round}`,
    namespace: `bench-archive-${round}`,
    environment: archive ? {} : { DECISION_ARCHIVE: "" },
    onOutcome: (outcome) => {
      if (outcome.kind !== "forwarded") return;
      archiveMs += outcome.timings.archiveMs;
      recordMs += outcome.timings.decideMs + outcome.timings.forwardMs + outcome.timings.archiveMs;
    },
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
    const run = {
      archive,
      rate: USERS / seconds,
      ...stats,
      failedRecords: stack.poller.stats.failedRecords,
      storedBytes: await storedBytes(s3, endpoints.bucket),
      archiveMs,
      recordMs,
    };
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
  for (const [round, archive] of ROUNDS.entries()) runs.push(await runOnce(archive, round));
  const warmUp = runs.shift() as Run;
  const rates = (archive: boolean) => runs.filter((run) => run.archive === archive).map((run) => run.rate);
  const [off, on] = [median(rates(false)), median(rates(true))];
  const archivedRuns = runs.filter((run) => run.archive);
  const bytesPerDecision = median(archivedRuns.map((run) => run.storedBytes / Math.max(1, run.archived)));
  // each "on" run against the mean of the "off" runs either side of it: a drift of the machine's load cancels
  const pairs = runs.flatMap((run, i) =>
    run.archive ? [run.rate / (((runs[i - 1] as Run).rate + (runs[i + 1] as Run).rate) / 2)] : [],
  );
  const share = median(archivedRuns.map((run) => run.archiveMs / run.recordMs));
  return [
    `Measured ${today()} by \`npm run bench -- archive\` (BENCH_USERS=${USERS}): the pipeline section's campaign, ` +
      `run ${ROUNDS.length} times in one run: a warm-up (off, ${n(warmUp.rate)} users/s, not counted), then the decision ` +
      "archive off and on in turn (on: a gzipped NDJSON line per batch to the emulator's bucket, as the local stack " +
      "writes them). Wall rates move with the machine's other load; the archive's own share of the records' time does not.",
    "",
    "| Figure | Value |",
    "|---|---|",
    `| Pipeline with the archive / without: each on run / the mean of the off runs either side of it | ${pairs.map((ratio) => `${ratio.toFixed(2)}×`).join(", ")}: median **${median(pairs).toFixed(2)}×** |`,
    `| Pipeline users/s, median of the runs: archive off / on (drift of the machine's load included) | ${n(off)} / ${n(on)} |`,
    `| Archive lines built, share of the records' summed time (median of the on runs) | ${(100 * share).toFixed(2)} % |`,
    `| Each run, users/s | ${runs.map((run) => `${run.archive ? "on" : "off"} ${n(run.rate)}`).join(", ")} |`,
    `| Decisions archived / lost, archive on (each run) | ${archivedRuns.map((run) => `${n(run.archived)} / ${run.lost}`).join("; ")} |`,
    `| Archive bytes stored per decision (gzipped) | ${bytesPerDecision.toFixed(2)} |`,
    `| Failed records (all runs) | ${runs.reduce((sum, run) => sum + run.failedRecords, 0)} |`,
  ];
}
