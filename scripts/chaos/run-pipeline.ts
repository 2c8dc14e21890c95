// One campaign pipeline scenario: two consumer processes on a campaign queue of the scenario's own, a seeded
// campaign stream pushed in real time, the nemesis injected 3 s in and healed after its duration; then the
// queue drained, the delivery queue and the DLQ read out, and what came out judged against what went in.
import { setTimeout as sleep } from "node:timers/promises";
import type { ClusterControl } from "./cluster-control.ts";
import {
  type CappedSend,
  checkPipeline,
  type PipelineCheck,
  type PipelineVerdict,
  type PushedMessage,
} from "./pipeline-checker.ts";
import { campaignStream, PIPELINE_CAPS } from "./pipeline-input.ts";
import { checkPipelineAfterLoss, type LossTimeline } from "./pipeline-loss-checker.ts";
import {
  type ConsumerProcess,
  type ConsumerReports,
  type PipelineQueues,
  type PipelineStack,
  VISIBILITY_SECONDS,
} from "./pipeline-stack.ts";
import { seedOf } from "./seeded.ts";
import { type ProductNemesis, STORE_NEMESES, type StoreContext } from "./store-nemeses.ts";

export interface PipelineContext extends StoreContext {
  stack: PipelineStack;
  queues: PipelineQueues;
  consumers: ConsumerProcess[];
}

export interface PipelineResult {
  id: string;
  nemesis: ProductNemesis<PipelineContext>;
  check: PipelineCheck;
  known: string | undefined;
  wallMs: number;
}

const INJECT_AFTER_MS = 3000;
const STREAM_MS = 10_000;
const OBSERVE_AFTER_HEAL_MS = 3000;
const CONSUMERS = 2;
/** How long the campaign queue may take to empty after the stream (a retried record waits out its visibility). */
const DRAIN_MS = 90_000;
/** How long the run waits for a consumer to report a data loss before it stops waiting (and fails). */
const REPORT_WAIT_MS = 10_000;

export const PIPELINE_NEMESES: readonly ProductNemesis<PipelineContext>[] = [
  ...STORE_NEMESES,
  {
    name: "redelivery-storm",
    summary:
      "the campaign queue's visibility timeout set to 0 for 3 s (shorter than any processing): every message received again while it is decided",
    durationMs: 3000,
    inject: (c) => c.stack.setVisibility(c.queues.campaign.url, 0),
    heal: (c) => c.stack.setVisibility(c.queues.campaign.url, VISIBILITY_SECONDS),
  },
  {
    name: "consumer-killed-mid-batch",
    summary: "kill -9 of a consumer process while it decides, started again at once; three times, 1 s apart",
    durationMs: 3000,
    inject: async (c) => {
      for (let i = 0; i < 3; i++) {
        const consumer = c.consumers[i % c.consumers.length] as ConsumerProcess;
        await consumer.kill9();
        await consumer.start();
        await sleep(1000);
      }
    },
    heal: async () => {},
  },
  {
    name: "s3-down-during-refresh",
    summary:
      "the S3 emulator drops every connection for 4 s while the consumers refresh their rules (every 1 s); one consumer cold-starts inside it",
    durationMs: 4000,
    inject: async (c) => {
      c.stack.s3Proxy.fault = { kind: "drop" };
      const consumer = c.consumers[1] as ConsumerProcess;
      await consumer.kill9();
      await consumer.start();
    },
    heal: async (c) => {
      c.stack.s3Proxy.fault = { kind: "pass" };
    },
  },
];

export async function runPipelineScenario(
  nemesis: ProductNemesis<PipelineContext>,
  parts: { cluster: ClusterControl; stack: PipelineStack; runId: string; index: number; seed: number },
  known: string | undefined,
): Promise<PipelineResult> {
  const id = `pipeline/${nemesis.name}`;
  const began = Date.now();
  const namespace = `p${parts.runId}-${parts.index}`;
  const queues = await parts.stack.queues(namespace);
  const capped: CappedSend[] = [];
  const reports: ConsumerReports = { decided: [], storeLostAt: [] };
  const consumers = Array.from({ length: CONSUMERS }, () => parts.stack.consumer(queues, namespace, capped, reports));
  const context: PipelineContext = {
    cluster: parts.cluster,
    pattern: `${namespace}:*`,
    state: {},
    stack: parts.stack,
    queues,
    consumers,
  };
  const pushed: PushedMessage[] = [];
  try {
    // the store initialised before the campaign, as a deployment's is: a flush while a consumer's first call
    // still writes the epoch keys loses only slots that never held state, and a run judged as "every slot
    // lost" would fail the sends those slots rightly allow
    if (nemesis.acknowledged) await parts.stack.acknowledgeStoreLoss(namespace);
    await Promise.all(consumers.map((consumer) => consumer.start()));
    const stream = campaignStream(
      seedOf(parts.seed, id),
      Math.max(STREAM_MS, INJECT_AFTER_MS + nemesis.durationMs + OBSERVE_AFTER_HEAL_MS),
    );
    const t0 = Date.now();
    const pushing = (async () => {
      for (const campaign of stream) {
        await sleep(Math.max(0, t0 + campaign.offsetMs - Date.now()));
        const at = Date.now();
        const messages = campaign.messages.map((userIds, j) => ({
          seq: pushed.length + j,
          campaignId: campaign.campaignId,
          channel: campaign.channel,
          userIds,
          at,
        }));
        pushed.push(...messages);
        await parts.stack.push(queues.campaign.url, messages);
      }
    })();
    await sleep(Math.max(0, t0 + INJECT_AFTER_MS - Date.now()));
    const injectedAt = Date.now();
    try {
      await nemesis.inject(context);
      await sleep(Math.max(0, t0 + INJECT_AFTER_MS + nemesis.durationMs - Date.now()));
    } finally {
      await nemesis.heal(context);
    }
    const loss: LossTimeline = {
      injectedAt,
      healedAt: Date.now(),
      reportedAt: undefined,
      acknowledgeStartedAt: undefined,
      acknowledgedAt: undefined,
    };
    if (nemesis.acknowledged) await acknowledgeOnceReported(parts.stack, namespace, reports, loss);
    await pushing;
    await parts.cluster.waitReady();
    // the operator's part once the fault is over: every dead letter redriven once, so the sends an attempt
    // counted before its message was dead-lettered (the store answered after the consumer gave up) go out as
    // the store's duplicates; what fails again is dead-lettered again with its reason
    const drained =
      (await parts.stack.drained(queues.campaign.url, DRAIN_MS)) &&
      ((await parts.stack.redriveAll(queues)) === 0 || (await parts.stack.drained(queues.campaign.url, DRAIN_MS)));
    await Promise.all(consumers.map((consumer) => consumer.stop()));
    const output = {
      pushed,
      delivered: await parts.stack.drainDelivery(queues.delivery),
      capped,
      deadLettered: await parts.stack.drainDeadLetters(queues.dlq),
    };
    const check = nemesis.acknowledged
      ? checkPipelineAfterLoss(output, PIPELINE_CAPS, reports.decided, loss)
      : checkPipeline(output, PIPELINE_CAPS);
    if (!drained) {
      const stuck: PipelineVerdict = {
        rule: "run",
        pass: false,
        detail: `the campaign queue still held messages ${DRAIN_MS / 1000} s after the stream`,
      };
      check.verdicts.push(stuck);
      check.pass = false;
    }
    if (check.figures.delivered === 0) {
      // a run that delivered nothing has no window for the checker to judge
      check.verdicts.push({ rule: "run", pass: false, detail: `none of ${check.figures.pushedSends} sends delivered` });
      check.pass = false;
    }
    if (context.state.notTheScenario) {
      check.verdicts.push({ rule: "run", pass: false, detail: context.state.notTheScenario });
      check.pass = false;
    }
    return { id, nemesis, check, known, wallMs: Date.now() - began };
  } finally {
    await Promise.all(consumers.map((consumer) => consumer.kill9()));
  }
}

/** The operator's part: once a consumer reported the loss (StoreLost), `tollgate store acknowledge`. */
async function acknowledgeOnceReported(
  stack: PipelineStack,
  namespace: string,
  reports: ConsumerReports,
  loss: LossTimeline,
): Promise<void> {
  const deadline = Date.now() + REPORT_WAIT_MS;
  while (reports.storeLostAt.length === 0 && Date.now() < deadline) await sleep(20);
  loss.reportedAt = reports.storeLostAt[0];
  if (loss.reportedAt === undefined) return;
  loss.acknowledgeStartedAt = Date.now();
  const slots = await stack.acknowledgeStoreLoss(namespace);
  loss.acknowledgedAt = Date.now();
  process.stderr.write(`[chaos] store acknowledged: ${slots.length} slots written again\n`);
}
