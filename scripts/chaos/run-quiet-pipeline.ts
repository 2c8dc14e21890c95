// One quiet-hours pipeline scenario (`pipeline-quiet/<nemesis>`): the pipeline's consumers deciding by the
// harness's clock, which reads QUIET_EDGE − QUIET_LEAD_MS when the stream starts, so in seconds the run goes
// through the end of New York's night and the start of Shanghai's. A seeded stream of campaigns on inapp (quiet
// hours) and email, most deferring; the nemesis 3 s in; then the queue drained (deferrals wait out their SQS
// delay there), the dead letters redriven once, and the deliveries (with when the delivery queue took each),
// the consumers' reports of held sends, and the DLQ judged by quiet-checker.ts.
import { writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { ClusterControl } from "./cluster-control.ts";
import type { CappedSend } from "./pipeline-checker.ts";
import type { ConsumerReports, PipelineStack } from "./pipeline-stack.ts";
import { checkQuietPipeline, type HeldReport, type QuietCheck, type QuietPushed } from "./quiet-checker.ts";
import {
  QUIET_CAPS,
  QUIET_CHANNEL,
  QUIET_EDGE,
  QUIET_LEAD_MS,
  QUIET_WINDOWS,
  quietStream,
  quietZoneOf,
} from "./quiet-input.ts";
import { PIPELINE_NEMESES, type PipelineContext } from "./run-pipeline.ts";
import { seedOf } from "./seeded.ts";
import type { ProductNemesis } from "./store-nemeses.ts";

const INJECT_AFTER_MS = 3000;
const STREAM_MS = 8000;
const OBSERVE_AFTER_HEAL_MS = 2000;
const CONSUMERS = 2;
/** How long the consumers get to start before the harness's clock reaches QUIET_EDGE − QUIET_LEAD_MS. */
const START_MS = 8000;
/** Campaign messages decided before the stream, so the consumers' first batches (rules, connections) are behind. */
const WARM_UP_MESSAGES = 4;
const WARM_UP_SEQ = -2;
const DRAIN_MS = 90_000;

/** The nemeses this family runs under: none, a primary killed, consumers killed mid-batch, a redelivery storm. */
export const QUIET_NEMESES: readonly ProductNemesis<PipelineContext>[] = PIPELINE_NEMESES.filter((n) =>
  ["none", "kill-9-primary", "consumer-killed-mid-batch", "redelivery-storm"].includes(n.name),
);

export interface QuietPipelineResult {
  id: string;
  check: QuietCheck;
  wallMs: number;
}

/** Where deferrals wait: the campaign queue's delays, or the local scheduler's bucket fired by the harness's clock. */
export type DeferralPath = "sqs-delay" | "scheduler";
/** The nemeses the scheduler path runs under too. */
export const SCHEDULER_NEMESES = ["none", "consumer-killed-mid-batch"];
const FIRE_EVERY_MS = 200;

export async function runQuietPipelineScenario(
  nemesis: ProductNemesis<PipelineContext>,
  parts: { cluster: ClusterControl; stack: PipelineStack; runId: string; index: number; seed: number },
  path: DeferralPath = "sqs-delay",
): Promise<QuietPipelineResult> {
  const id = `pipeline-quiet/${nemesis.name}${path === "scheduler" ? "/scheduler" : ""}`;
  const began = Date.now();
  const namespace = `q${parts.runId}-${parts.index}`;
  const queues = await parts.stack.queues(namespace);
  const capped: CappedSend[] = [];
  const held: HeldReport[] = [];
  const reports: ConsumerReports = { decided: [], storeLostAt: [], held };
  // the harness's clock: the system's plus this, reading QUIET_EDGE − QUIET_LEAD_MS once the consumers run
  const plannedStart = Date.now() + START_MS;
  const offsetMs = QUIET_EDGE - QUIET_LEAD_MS - plannedStart;
  const now = () => Date.now() + offsetMs;
  const schedulesPrefix = path === "scheduler" ? `schedules/${namespace}/` : undefined;
  const consumers = Array.from({ length: CONSUMERS }, () =>
    parts.stack.consumer(queues, namespace, capped, reports, {
      clockOffsetMs: offsetMs,
      ...(schedulesPrefix ? { schedulesPrefix } : {}),
    }),
  );
  // the local scheduler: what is due by the harness's clock fired onto the campaign queue, until the run ends
  let firing = schedulesPrefix !== undefined;
  const fired = (async () => {
    while (firing && schedulesPrefix) {
      await parts.stack.fireDeferrals(schedulesPrefix, now(), queues.campaign.url).catch(() => 0);
      await sleep(FIRE_EVERY_MS);
    }
  })();
  /** The queue empty and, on the scheduler path, no deferral waiting in the bucket. */
  const drainedAll = async (timeoutMs: number): Promise<boolean> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const left = Math.max(0, deadline - Date.now());
      if (!(await parts.stack.drained(queues.campaign.url, left))) return false;
      if (!schedulesPrefix || (await parts.stack.pendingDeferrals(schedulesPrefix)) === 0) return true;
      if (Date.now() > deadline) return false;
      await sleep(FIRE_EVERY_MS);
    }
  };
  const context: PipelineContext = {
    cluster: parts.cluster,
    pattern: `${namespace}:*`,
    state: {},
    stack: parts.stack,
    queues,
    consumers,
  };
  const pushed: QuietPushed[] = [];
  try {
    await Promise.all(consumers.map((consumer) => consumer.start()));
    await warmUp(parts.stack, queues.campaign.url, reports, now);
    await sleep(Math.max(0, plannedStart - Date.now()));
    const stream = quietStream(
      seedOf(parts.seed, id),
      Math.max(STREAM_MS, INJECT_AFTER_MS + nemesis.durationMs + OBSERVE_AFTER_HEAL_MS),
    );
    const t0 = Date.now();
    process.stderr.write(`[chaos] ${id}: the stream starts ${QUIET_EDGE - now()} ms before the night's edge\n`);
    const pushing = (async () => {
      for (const campaign of stream) {
        await sleep(Math.max(0, t0 + campaign.offsetMs - Date.now()));
        const at = now();
        const messages = campaign.messages.map((userIds, j) => ({
          seq: pushed.length + j,
          campaignId: campaign.campaignId,
          channel: campaign.channel,
          userIds,
          at,
          deferMaxMs: campaign.deferMaxMs,
        }));
        pushed.push(...messages);
        await parts.stack.push(queues.campaign.url, messages);
      }
    })();
    await sleep(Math.max(0, t0 + INJECT_AFTER_MS - Date.now()));
    try {
      await nemesis.inject(context);
      await sleep(Math.max(0, t0 + INJECT_AFTER_MS + nemesis.durationMs - Date.now()));
    } finally {
      await nemesis.heal(context);
    }
    await pushing;
    await parts.cluster.waitReady();
    const drained =
      (await drainedAll(DRAIN_MS)) && ((await parts.stack.redriveAll(queues)) === 0 || (await drainedAll(DRAIN_MS)));
    await Promise.all(consumers.map((consumer) => consumer.stop()));
    // a capped send of a campaign that does not defer is reported `capped`: its last word
    const cappedReports: HeldReport[] = capped.map((c) => ({
      seq: c.seq,
      userId: c.userId,
      decision: "capped",
      byCap: true,
      decidedAt: c.decidedAt ?? 0,
    }));
    const output = {
      pushed,
      delivered: (await parts.stack.drainTimedDelivery(queues.delivery, offsetMs)).filter((d) => d.seq >= 0),
      reports: [...held, ...cappedReports].filter((r) => r.seq >= 0),
      deadLettered: await parts.stack.drainDeadLetters(queues.dlq),
    };
    // what came out, for a closer look than the table gives
    writeFileSync(resolve(".local", "chaos", `${namespace}-quiet.json`), JSON.stringify({ id, offsetMs, ...output }));
    const check = checkQuietPipeline(output, {
      caps: QUIET_CAPS,
      channel: QUIET_CHANNEL,
      windows: QUIET_WINDOWS,
      zoneOf: quietZoneOf,
    });
    const fail = (detail: string) => {
      check.verdicts.push({ rule: "run", pass: false, detail });
      check.pass = false;
    };
    if (!drained) fail(`the campaign queue still held messages ${DRAIN_MS / 1000} s after the stream`);
    if (check.figures.delivered === 0) fail(`none of ${check.figures.pushedSends} sends delivered`);
    // the scenario is about held sends: a run in which none was deferred and delivered later proves nothing
    if (check.figures.deferredDelivered === 0) fail("no send deferred by quiet hours was delivered after its night");
    if (context.state.notTheScenario) fail(context.state.notTheScenario);
    return { id, check, wallMs: Date.now() - began };
  } finally {
    firing = false;
    await fired;
    await Promise.all(consumers.map((consumer) => consumer.kill9()));
  }
}

/** Warm-up messages (a user outside the stream, on email) pushed and waited for, at most START_MS. */
async function warmUp(stack: PipelineStack, queueUrl: string, reports: ConsumerReports, now: () => number) {
  const messages = Array.from({ length: WARM_UP_MESSAGES }, (_, i) => ({
    seq: WARM_UP_SEQ,
    campaignId: `warm-up-${i}`,
    channel: "email",
    userIds: [999_999],
    at: now(),
  }));
  await stack.push(queueUrl, messages);
  const deadline = Date.now() + START_MS;
  const warmed = () => reports.decided.filter((d) => d.seq === WARM_UP_SEQ).length >= WARM_UP_MESSAGES;
  while (!warmed() && Date.now() < deadline) await sleep(50);
}
