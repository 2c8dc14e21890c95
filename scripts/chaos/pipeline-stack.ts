// The campaign pipeline of a chaos run, beside the harness's Redis Cluster: the fauxqs S3 + SQS emulator (the
// bucket and its policy behind a fault proxy, so a nemesis can take S3 down while the queues stay up), per
// scenario a campaign queue with its DLQ and a delivery queue, and the consumers as processes of their own.
import { type ChildProcess, fork } from "node:child_process";
import { CreateBucketCommand, type S3Client } from "@aws-sdk/client-s3";
import {
  CreateQueueCommand,
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SetQueueAttributesCommand,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import { buildApp as buildFauxqs } from "fauxqs";
import { createAwsClients } from "../../functions/adapters/aws-clients.ts";
import { S3Schedules } from "../../functions/adapters/local-schedules.ts";
import { createRedisCluster } from "../../functions/adapters/redis-cluster.ts";
import { chunkEntries, SqsCampaignQueue } from "../../functions/adapters/sqs-sinks.ts";
import { publishPolicy, uploadObject } from "../../functions/app/operator-actions.ts";
import { acknowledgeStoreLoss } from "../../functions/app/store-actions.ts";
import type { DeliveryMessage } from "../../functions/core/capping/delivery.ts";
import { zoneBitmapKey } from "../../functions/core/capping/policy.ts";
import { buildSegments } from "../../functions/core/capping/segment-builder.ts";
import { deadLetterOf, redriveDeadLetters } from "../dead-letter-queue.ts";
import { readDelivery } from "../delivery-queue.ts";
import type { ConsumerMessage } from "./consumer-main.ts";
import { type FaultProxy, startFaultProxy } from "./fault-proxy.ts";
import type { CappedSend, DeadLetteredMessage, DeliveredSend } from "./pipeline-checker.ts";
import type { HeldReport, QuietPushed, TimedDelivery } from "./quiet-checker.ts";
import { quietZoneMembers } from "./quiet-input.ts";

const REGION = "us-east-1";
const BUCKET = "tollgate-chaos-pipeline";
const CONSUMER = new URL("./consumer-main.ts", import.meta.url).pathname;
/** The campaign queue's visibility timeout and maxReceiveCount (the consumer keeps named sends 2 × 5 s). */
export const VISIBILITY_SECONDS = 2;
export const MAX_RECEIVE_COUNT = 5;

export interface PipelineQueues {
  campaign: { url: string; arn: string };
  dlq: string;
  dlqArn: string;
  delivery: string;
}

/** What the consumers of a scenario reported besides their capped sends: each record decided, each loss found. */
export interface ConsumerReports {
  decided: NonNullable<ConsumerMessage["decided"]>[];
  /** When a consumer told of a hash slot lost (true clock, ms): the StoreLost alarm as the operator sees it. */
  storeLostAt: number[];
  /** The sends a consumer held or deferred (quiet hours, or caps of a deferring campaign). */
  held?: HeldReport[];
}

/** A consumer process: kill -9 and start again; every capped decision it reported stays in `capped`. */
export class ConsumerProcess {
  private child: ChildProcess | undefined;

  constructor(
    private readonly env: NodeJS.ProcessEnv,
    readonly capped: CappedSend[],
    private readonly logFile?: number,
    private readonly reports?: ConsumerReports,
  ) {}

  async start(): Promise<void> {
    const child = fork(CONSUMER, [], {
      execArgv: ["--import", "tsx"],
      env: this.env,
      stdio: ["ignore", this.logFile ?? "ignore", this.logFile ?? "ignore", "ipc"],
    });
    this.child = child;
    child.on("message", (message: ConsumerMessage) => {
      if (message.type === "capped") this.capped.push(...(message.capped ?? []));
      if (message.type === "decided" && message.decided) this.reports?.decided.push(message.decided);
      if (message.type === "store-lost") this.reports?.storeLostAt.push(Date.now());
      if (message.type === "held") this.reports?.held?.push(...(message.held ?? []));
    });
    await new Promise<void>((resolve, reject) => {
      child.once("message", () => resolve());
      child.once("exit", (code) => reject(new Error(`a consumer exited (${code}) before polling`)));
    });
  }

  async kill9(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGKILL");
    await exited;
  }

  /** Lets its invocations finish, then exits (killed if it takes longer than `timeoutMs`). */
  async stop(timeoutMs = 20_000): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.send({ type: "stop" });
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    await exited;
    clearTimeout(timer);
  }
}

export class PipelineStack {
  private s3!: S3Client;
  sqs!: SQSClient;
  private stopAws: () => Promise<void> = async () => {};
  private awsEndpoint = "";
  /** In front of the bucket (the queues' requests always pass). */
  s3Proxy!: FaultProxy;

  constructor(
    readonly redisNodes: string[],
    private readonly logFile?: number,
  ) {}

  async start(policy: object): Promise<void> {
    process.env.AWS_ACCESS_KEY_ID ??= "local";
    process.env.AWS_SECRET_ACCESS_KEY ??= "local";
    const fauxqs = buildFauxqs({ logger: false, host: "127.0.0.1" });
    this.awsEndpoint = await fauxqs.listen({ port: 0, host: "127.0.0.1" });
    this.stopAws = () => fauxqs.close();
    ({ s3: this.s3, sqs: this.sqs } = createAwsClients({ region: REGION, endpoint: this.awsEndpoint }));
    await this.s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
    // the quiet-hours family's zones, published before the policy that names them
    for (const [zone, bitmap] of buildSegments(quietZoneMembers()))
      await uploadObject(this.s3, BUCKET, zoneBitmapKey(zone), bitmap);
    await publishPolicy(this.s3, BUCKET, JSON.stringify(policy));
    this.s3Proxy = await startFaultProxy(
      () => this.awsEndpoint,
      (path) => path.startsWith(`/${BUCKET}`),
    );
  }

  async stop(): Promise<void> {
    await this.s3Proxy?.stop();
    await this.stopAws();
  }

  async queues(prefix: string): Promise<PipelineQueues> {
    const create = async (name: string, attributes: Record<string, string>) => {
      const { QueueUrl } = await this.sqs.send(new CreateQueueCommand({ QueueName: name, Attributes: attributes }));
      const { Attributes } = await this.sqs.send(
        new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["QueueArn"] }),
      );
      return { url: QueueUrl as string, arn: Attributes?.QueueArn as string };
    };
    const dlq = await create(`${prefix}-campaign-dlq`, {});
    const campaign = await create(`${prefix}-campaign`, {
      VisibilityTimeout: String(VISIBILITY_SECONDS),
      RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlq.arn, maxReceiveCount: MAX_RECEIVE_COUNT }),
    });
    const delivery = await create(`${prefix}-delivery`, {});
    return { campaign, dlq: dlq.url, dlqArn: dlq.arn, delivery: delivery.url };
  }

  /**
   * A consumer's environment: the deployed contract (infra/functions.ts), S3 through the fault proxy, deferrals
   * by the campaign queue's delays (no EventBridge Scheduler here: a scenario defers within 15 minutes) or in
   * the bucket under `schedulesPrefix`, and its clock `clockOffsetMs` ahead of the system's.
   */
  consumer(
    queues: PipelineQueues,
    namespace: string,
    capped: CappedSend[],
    reports?: ConsumerReports,
    options: { clockOffsetMs?: number; schedulesPrefix?: string } = {},
  ): ConsumerProcess {
    // with a schedules prefix, every deferral waits in the bucket (the local stack's scheduler), fired by
    // fireDeferrals() on the harness's clock
    const deferrals = options.schedulesPrefix
      ? { DEFERRALS: `s3://${BUCKET}/${options.schedulesPrefix}` }
      : {
          DEFERRALS: "aws",
          CAMPAIGN_QUEUE_URL: queues.campaign.url,
          CAMPAIGN_QUEUE_ARN: queues.campaign.arn,
          DEFERRAL_SCHEDULE_GROUP: "tollgate-chaos",
          DEFERRAL_ROLE_ARN: "arn:aws:iam::000000000000:role/tollgate-chaos-unused",
          DEFERRAL_DLQ_ARN: queues.dlqArn,
        };
    return new ConsumerProcess(
      {
        ...process.env,
        REDIS_NODES: this.redisNodes.join(","),
        CONFIG_BUCKET: BUCKET,
        AWS_REGION: REGION,
        AWS_ENDPOINT_URL: this.s3Proxy.url,
        DELIVERY_QUEUE_URL: queues.delivery,
        DEAD_LETTER_QUEUE_URL: queues.dlq,
        CAMPAIGN_MAX_RECEIVE_COUNT: String(MAX_RECEIVE_COUNT),
        CAMPAIGN_REDELIVERY_SECONDS: String(VISIBILITY_SECONDS * MAX_RECEIVE_COUNT),
        REFRESH_SECONDS: "1",
        KEY_NAMESPACE: namespace,
        DELIVERY_BATCH_SIZE: "20",
        CHAOS_CAMPAIGN_QUEUE_URL: queues.campaign.url,
        CHAOS_CAMPAIGN_QUEUE_ARN: queues.campaign.arn,
        CHAOS_CLOCK_OFFSET_MS: String(options.clockOffsetMs ?? 0),
        ...deferrals,
        POWERTOOLS_LOG_LEVEL: "ERROR",
        POWERTOOLS_METRICS_DISABLED: "true",
      },
      capped,
      this.logFile,
      reports,
    );
  }

  /** `tollgate store acknowledge` for the keys of `namespace` (the CLI's own code): the lost slots count again. */
  async acknowledgeStoreLoss(namespace: string): Promise<number[]> {
    const cluster = createRedisCluster({
      nodes: this.redisNodes.slice(0, 3).map((node) => {
        const [host, port] = node.split(":");
        return { host: host as string, port: Number(port) };
      }),
    });
    try {
      return (await acknowledgeStoreLoss(this.s3, BUCKET, cluster, namespace)).slotsWritten;
    } finally {
      cluster.disconnect();
    }
  }

  /** The campaign tool: each message onto the campaign queue, its `seq` in the payload. */
  async push(queueUrl: string, messages: readonly QuietPushed[]): Promise<void> {
    const entries = messages.map((m, i) => ({
      Id: String(i),
      MessageBody: JSON.stringify({
        campaignId: m.campaignId,
        channel: m.channel,
        userIds: m.userIds,
        at: m.at,
        ...(m.deferMaxMs === undefined ? {} : { defer: { maxMs: m.deferMaxMs } }),
        payload: { seq: m.seq },
      }),
    }));
    for (const chunk of chunkEntries(entries)) {
      await this.sqs.send(new SendMessageBatchCommand({ QueueUrl: queueUrl, Entries: chunk }));
    }
  }

  /** The local scheduler's part: the deferrals under `prefix` due at `now` sent to the campaign queue; how many. */
  fireDeferrals(prefix: string, now: number, queueUrl: string): Promise<number> {
    return new S3Schedules(this.s3, BUCKET, prefix).fireDue(now, new SqsCampaignQueue(this.sqs, queueUrl));
  }

  /** How many deferrals still wait under `prefix`. */
  async pendingDeferrals(prefix: string): Promise<number> {
    return (await new S3Schedules(this.s3, BUCKET, prefix).pending()).length;
  }

  async setVisibility(queueUrl: string, seconds: number): Promise<void> {
    await this.sqs.send(
      new SetQueueAttributesCommand({ QueueUrl: queueUrl, Attributes: { VisibilityTimeout: String(seconds) } }),
    );
  }

  /**
   * Resolves once the queue holds no message, visible, in flight or delayed (a retry or a deferral waiting out
   * its delay is not done); false if it still does after `timeoutMs`.
   */
  async drained(queueUrl: string, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const { Attributes } = await this.sqs.send(
        new GetQueueAttributesCommand({
          QueueUrl: queueUrl,
          AttributeNames: [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
          ],
        }),
      );
      const waiting =
        Number(Attributes?.ApproximateNumberOfMessages ?? 0) +
        Number(Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0) +
        Number(Attributes?.ApproximateNumberOfMessagesDelayed ?? 0);
      if (waiting === 0) return true;
      if (Date.now() > deadline) return false;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }

  /** Every dead letter sent back to the campaign queue as it came (`tollgate dlq redrive --all`); how many. */
  async redriveAll(queues: PipelineQueues): Promise<number> {
    return (await redriveDeadLetters(this.sqs, queues.dlq, queues.campaign.url, () => true)).length;
  }

  /** Every send of the delivery queue, read and deleted. */
  async drainDelivery(queueUrl: string): Promise<DeliveredSend[]> {
    return (await this.drainTimedDelivery(queueUrl, 0)).map(({ sentAt: _sentAt, ...send }) => send);
  }

  /** Every send of the delivery queue with when the queue took it (plus `offsetMs`: the harness's clock). */
  async drainTimedDelivery(queueUrl: string, offsetMs: number): Promise<TimedDelivery[]> {
    const sends: TimedDelivery[] = [];
    await readDelivery(this.sqs, queueUrl, {
      remove: true,
      onMessage: (message: DeliveryMessage, sentAt: number) => {
        const seq = (message.payload as { seq?: number } | undefined)?.seq ?? -1;
        for (const send of message.sends)
          sends.push({
            seq,
            campaignId: message.campaignId,
            channel: message.channel,
            userId: send.userId,
            dedupeId: send.dedupeId,
            sentAt: sentAt + offsetMs,
          });
      },
    });
    return sends;
  }

  /** Every message of the DLQ with its reason, read and deleted. */
  async drainDeadLetters(queueUrl: string): Promise<DeadLetteredMessage[]> {
    const letters: DeadLetteredMessage[] = [];
    for (;;) {
      const { Messages = [] } = await this.sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: queueUrl,
          MaxNumberOfMessages: 10,
          VisibilityTimeout: 120,
          MessageAttributeNames: ["All"],
          MessageSystemAttributeNames: ["All"],
        }),
      );
      if (Messages.length === 0) return letters;
      for (const message of Messages) {
        const letter = deadLetterOf(message);
        const seq = (JSON.parse(letter.body) as { payload?: { seq?: number } }).payload?.seq ?? -1;
        letters.push({ seq, reason: letter.reason });
      }
      await this.sqs.send(
        new DeleteMessageBatchCommand({
          QueueUrl: queueUrl,
          Entries: Messages.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle as string })),
        }),
      );
    }
  }
}
