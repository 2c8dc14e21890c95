// `npm run demo`: the main job on this machine, through the real pipeline.
//
// It starts the local stack: the Redis Cluster, S3 + SQS (fauxqs), and the campaign consumer driven by
// an SQS poller. It then:
// - builds sample segments for 1,000,000 users and uploads them to S3 with a policy (its tenant: the
//   local principal, whose key the local Function URLs accept);
// - pushes a campaign to every user onto the campaign queue and waits for it to drain;
// - pushes a second campaign on the same channel.
// For each campaign it reads the delivery queue and prints, per segment, who was sent and who was capped
// with the cap that bit; then an in-app campaign with deferral to users in a zone where it is night now:
// their sends wait for 08:00 there, the stack's clock is moved to that instant, and they arrive. It ends with
// the second campaign's report and a why-answer read back from the decision archive, and stops everything
// it started.

import type { SQSClient } from "@aws-sdk/client-sqs";
import { createAwsClients } from "../functions/adapters/aws-clients.ts";
import { pushCampaign, uploadObject, uploadRules } from "../functions/app/operator-actions.ts";
import type { ConsumeOutcome } from "../functions/core/capping/campaign-consumer.ts";
import type { SegmentTotals } from "../functions/core/capping/decisions.ts";
import { parsePolicy, zoneBitmapKey } from "../functions/core/capping/policy.ts";
import { buildSegments } from "../functions/core/capping/segment-builder.ts";
import { DEFAULT_ARCHIVE_PREFIX } from "../functions/core/shared/decision-archive.ts";
import { campaignReport, campaignReportText, why, whyText } from "./archive-answers.ts";
import { openArchive } from "./archive-query.ts";
import { readDelivery } from "./delivery-queue.ts";
import { withLocalTenant } from "./local/local-principals.ts";
import { type LocalStack, startLocalStack } from "./local-stack.ts";

const USERS = Number(process.env.DEMO_USERS ?? 1_000_000);
/** Users 0-999 live where it is night now; everyone else where it is midday. */
const NIGHT_OWLS = 1_000;

/** A zone (of the platform's list) whose local hour is now one of `hours`. */
function zoneWhereItIs(hours: readonly number[], now: number): string {
  for (const hour of hours) {
    const zone = Intl.supportedValuesOf("timeZone").find((candidate) => localHour(candidate, now) === hour);
    if (zone) return zone;
  }
  throw new Error(`no zone at ${hours.join("/")} h now`);
}
const localHour = (zone: string, at: number) =>
  Number(new Intl.DateTimeFormat("en-US", { timeZone: zone, hour: "numeric", hourCycle: "h23" }).format(at));
const localTime = (zone: string, at: number) =>
  new Intl.DateTimeFormat("en-GB", { timeZone: zone, hour: "2-digit", minute: "2-digit" }).format(at);

const startedAt = Date.now();
const nightZone = zoneWhereItIs([23, 22, 0], startedAt);
const dayZone = zoneWhereItIs([12, 13, 11], startedAt);

const policyDocument = {
  version: "demo.1",
  channels: ["email", "push", "sms", "inapp"],
  defaultZone: dayZone,
  zones: [nightZone],
  quietHours: { inapp: [{ from: "21:00", to: "08:00" }] },
  segments: [
    { name: "new", bitmap: "segments/new.roaring", caps: { push: [{ window: "1d", max: 1 }] } },
    {
      name: "active",
      bitmap: "segments/active.roaring",
      caps: {
        push: [
          { window: "1d", max: 2 },
          { window: "7d", max: 5 },
        ],
      },
    },
    { name: "dormant", bitmap: "segments/dormant.roaring", caps: { "*": [{ window: "7d", max: 1 }] } },
  ],
  default: { name: "unsegmented", caps: { "*": [{ window: "7d", max: 3 }] } },
};

/** Sample membership: 10% new, 40% active, 30% dormant, the rest in no segment. */
function sampleMembers(): Record<string, number[]> {
  const lists: Record<string, number[]> = { new: [], active: [], dormant: [] };
  for (let id = 0; id < USERS; id++) {
    const bucket = (Math.imul(id, 0x9e3779b1) >>> 0) % 10;
    const name = bucket < 1 ? "new" : bucket < 5 ? "active" : bucket < 8 ? "dormant" : undefined;
    if (name) lists[name]?.push(id);
  }
  return lists;
}

async function main(): Promise<void> {
  const started = performance.now();
  console.log(
    "starting the local stack: Redis Cluster (3 primaries + 3 replicas), S3 + SQS (fauxqs), campaign consumer ...",
  );
  const decided = new Map<string, Record<string, SegmentTotals>>();
  // the stack's clock: the system's, moved ahead at the end to the instant the night-owls' night ends
  let skew = 0;
  const stack = await startLocalStack({
    clock: { now: () => Date.now() + skew },
    // a namespace per run, so running the demo again starts from empty logs
    environment: { KEY_NAMESPACE: `demo-${Date.now()}` },
    onOutcome: (outcome: ConsumeOutcome) => {
      if (outcome.kind !== "forwarded") return;
      const totals = decided.get(outcome.campaignId) ?? {};
      for (const [segment, t] of Object.entries(outcome.result.totals)) {
        const sum = totals[segment] ?? { allowed: 0, capped: 0, duplicate: 0, exempt: 0, cappedBy: {} };
        totals[segment] = sum;
        sum.allowed += t.allowed;
        sum.capped += t.capped;
        sum.duplicate += t.duplicate;
        sum.exempt += t.exempt;
        for (const [cap, n] of Object.entries(t.cappedBy)) sum.cappedBy[cap] = (sum.cappedBy[cap] ?? 0) + n;
        for (const [cap, n] of Object.entries(t.droppedBy ?? {})) {
          sum.droppedBy ??= {};
          sum.droppedBy[cap] = (sum.droppedBy[cap] ?? 0) + n;
        }
      }
      decided.set(outcome.campaignId, totals);
    },
  });
  try {
    const { endpoints } = stack;
    const { s3, sqs } = createAwsClients({ region: endpoints.region, endpoint: endpoints.awsEndpoint });
    const owls = buildSegments([{ name: nightZone, userIds: Array.from({ length: NIGHT_OWLS }, (_, i) => i) }]);
    await uploadObject(s3, endpoints.bucket, zoneBitmapKey(nightZone), owls.get(nightZone) as Uint8Array);
    await uploadRules(s3, endpoints.bucket, withLocalTenant(policyDocument), sampleMembers());
    console.log(
      `uploaded policy ${policyDocument.version}, 3 segment bitmaps and the zone bitmap of ${nightZone} to s3://${endpoints.bucket}`,
    );

    const userIds = Array.from({ length: USERS }, (_, i) => i);
    const rows: string[][] = [];
    for (const campaignId of ["spring-sale", "flash-sale"]) {
      const t0 = performance.now();
      const messages = await pushCampaign(sqs, endpoints.campaignQueueUrl, {
        campaignId,
        channel: "push",
        userIds,
        payload: { template: campaignId },
      });
      await stack.poller.drained();
      const sent: Record<string, number> = {};
      const deliveryMessages = await readDelivery(sqs, endpoints.deliveryQueueUrl, {
        remove: true,
        onMessage: (message) => {
          for (const send of message.sends) sent[send.segment] = (sent[send.segment] ?? 0) + 1;
        },
      });
      const seconds = (performance.now() - t0) / 1000;
      console.log(
        `${campaignId}: ${USERS} users in ${messages} campaign messages -> ${deliveryMessages} delivery messages, ${seconds.toFixed(1)} s`,
      );
      for (const [segment, totals] of Object.entries(decided.get(campaignId) ?? {})) {
        const caps = Object.entries(totals.cappedBy)
          .map(([cap, n]) => `${cap} (${n})`)
          .join(", ");
        rows.push([campaignId, segment, String(sent[segment] ?? 0), String(totals.capped), caps || "-"]);
      }
    }
    printTable([["campaign", "segment", "sent", "capped", "cap that bit"], ...rows]);
    // held by caps: capped, or (the campaign defers) dropped because a cap frees later than its 12 h allow
    const byCap = (counts: Record<string, number> | undefined) =>
      Object.values(counts ?? {}).reduce((sum, n) => sum + n, 0);
    const nightOwlsCapped = () =>
      Object.values(decided.get("night-owl") ?? {}).reduce(
        (sum, totals) => sum + totals.capped + byCap(totals.droppedBy),
        0,
      );
    await nightOwls(
      stack,
      sqs,
      (ms) => {
        skew = ms;
      },
      nightOwlsCapped,
    );
    // the same answers from the decision archive (what `tollgate campaign report` and `tollgate why` print)
    const archive = await openArchive({ s3, bucket: endpoints.bucket, prefix: DEFAULT_ARCHIVE_PREFIX });
    try {
      console.log(`\n${campaignReportText(await campaignReport(archive, "flash-sale"))}`);
      const { archived, lost } = stack.consumer.archive?.stats() ?? { archived: 0, lost: 0 };
      console.log(`\ndecision archive: ${archived} decisions archived, ${lost} lost`);
      console.log(
        `\n${whyText(await why(archive, { userId: 0, campaignId: "flash-sale" }, parsePolicy(policyDocument)), { userId: 0 })}`,
      );
    } finally {
      archive.close();
    }
    const dead = stack.poller.stats.failedRecords;
    console.log(
      `\n${stack.poller.stats.invocations} handler invocations, ${dead} failed records; ${((performance.now() - started) / 1000).toFixed(1)} s in all`,
    );
  } finally {
    await stack.stop();
    console.log("stopped the local stack");
  }
}

/**
 * An in-app campaign with `defer` to the night-owls and as many others: the others' sends go out now, the
 * night-owls' wait for 08:00 in their zone. The stack's clock is moved to that instant; the local scheduler
 * fires the deferred batch, the consumer decides it, and its sends arrive.
 */
async function nightOwls(
  stack: LocalStack,
  sqs: SQSClient,
  moveClock: (skewMs: number) => void,
  capped: () => number,
): Promise<void> {
  const { endpoints } = stack;
  const now = Date.now();
  console.log(
    `\nin-app campaign "night-owl" (quiet hours 21:00-08:00, defer up to 12 h) to users 0-${2 * NIGHT_OWLS - 1}: ` +
      `0-${NIGHT_OWLS - 1} live in ${nightZone} (${localTime(nightZone, now)} there), the rest in ${dayZone} (${localTime(dayZone, now)})`,
  );
  await pushCampaign(sqs, endpoints.campaignQueueUrl, {
    campaignId: "night-owl",
    channel: "inapp",
    userIds: Array.from({ length: 2 * NIGHT_OWLS }, (_, i) => i),
    defer: { maxMs: 12 * 3_600_000 },
  });
  await stack.poller.drained();
  const sentNow = await countSends(sqs, endpoints.deliveryQueueUrl);
  const cappedNow = capped();
  const [eligibleAt] = await stack.pendingDeferrals();
  if (eligibleAt === undefined) throw new Error("night-owl: nothing was deferred");
  console.log(
    `  now: ${sentNow} sent, ${cappedNow} held by their "*" caps (dropped: the caps free later than 12 h); ${NIGHT_OWLS} deferred to ` +
      `${new Date(eligibleAt).toISOString()} (08:00 in ${nightZone})`,
  );
  moveClock(eligibleAt - Date.now());
  console.log(`  the stack's clock moves ahead to ${new Date(eligibleAt).toISOString()}`);
  // the local scheduler fires every second; the poller then decides the deferred batch
  let arrived = 0;
  for (let tries = 0; arrived === 0 && tries < 30; tries++) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    await stack.poller.drained();
    arrived = await countSends(sqs, endpoints.deliveryQueueUrl);
  }
  console.log(
    `  arrived: ${arrived} sends and ${capped() - cappedNow} held by caps, decided at ${localTime(nightZone, eligibleAt)} ` +
      `in ${nightZone}, after quiet hours`,
  );
}

async function countSends(sqs: SQSClient, queueUrl: string): Promise<number> {
  let sends = 0;
  await readDelivery(sqs, queueUrl, { remove: true, onMessage: (message) => (sends += message.sends.length) });
  return sends;
}

function printTable(rows: string[][]): void {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((row) => row[c]!.length)));
  console.log("");
  for (const row of rows)
    console.log(
      row
        .map((cell, c) => cell.padEnd(widths[c]!))
        .join("  ")
        .trimEnd(),
    );
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
