// `npm run local`: the whole campaign pipeline on this machine with real parts. It runs:
// - the Redis Cluster;
// - fauxqs (S3 + SQS, in process): the bucket, the campaign and delivery queues, and their DLQs with a
//   redrive policy;
// - the campaign consumer handler, driven by an SQS poller as Lambda's event source mapping would drive it;
// - the check API handler behind a local Function URL (HTTP on 127.0.0.1, payload 2.0 events).
// It writes .local/endpoints.json, stays up until Ctrl-C, then stops everything it started and removes the
// file. A stack killed before it could (SIGKILL) is cleaned up by the next start (local/stack-record.ts).
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { CreateBucketCommand } from "@aws-sdk/client-s3";
import { CreateQueueCommand, GetQueueAttributesCommand, type SQSClient } from "@aws-sdk/client-sqs";
import { buildApp as buildFauxqs } from "fauxqs";
import { createAwsClients } from "../functions/adapters/aws-clients.ts";
import { S3Schedules } from "../functions/adapters/local-schedules.ts";
import { SqsCampaignQueue } from "../functions/adapters/sqs-sinks.ts";
import type { CheckApiVariables, CommonVariables, ConsumerVariables } from "../functions/app/environment.ts";
import { wireCampaignConsumer, wireCheckApi } from "../functions/app/wiring.ts";
import { type Clock, systemClock } from "../functions/core/shared/clock.ts";
import { DEFAULT_ARCHIVE_PREFIX } from "../functions/core/shared/decision-archive.ts";
import type { CampaignConsumerHandlerDeps } from "../functions/handlers/campaign-consumer-handler.ts";
import { isMain } from "./is-main.ts";
import { ENDPOINTS_FILE, type Endpoints } from "./local/endpoints.ts";
import { type FunctionUrlAuth, startFunctionUrlServer } from "./local/function-url-server.ts";
import { LOCAL_CREDENTIAL } from "./local/local-principals.ts";
import type { LocalCredential } from "./local/sigv4-verify.ts";
import { SqsPoller } from "./local/sqs-poller.ts";
import { cleanUpAbandonedStack, removeStackFiles, writeStackRecord } from "./local/stack-record.ts";
import { startCluster, stopCluster } from "./redis-cluster.ts";

export interface LocalStackOptions {
  redisBasePort?: number;
  /** 0 picks a free port. */
  awsPort?: number;
  region?: string;
  bucket?: string;
  /** Prefix of the queue names, so several stacks can share an emulator. */
  queuePrefix?: string;
  batchSize?: number;
  batchingWindowMs?: number;
  concurrency?: number;
  visibilityTimeoutSeconds?: number;
  maxReceiveCount?: number;
  functionTimeoutMs?: number;
  /** Extra consumer environment (DELIVERY_BATCH_SIZE, REFRESH_SECONDS, KEY_NAMESPACE, ...). */
  environment?: Partial<ConsumerVariables>;
  /** Attributes of the delivery queue (tests set a small MaximumMessageSize). */
  deliveryQueueAttributes?: Record<string, string>;
  /** Write .local/endpoints.json (default true). */
  writeEndpoints?: boolean;
  /** Start the poller (default true). */
  poll?: boolean;
  /** Told of every record the consumer completed. */
  onOutcome?: CampaignConsumerHandlerDeps["onOutcome"];
  /** Port of the check API's Function URL (0 picks a free one). */
  functionUrlPort?: number;
  /** Port of the QuotaSync function's URL (0 picks a free one). */
  quotaSyncUrlPort?: number;
  /** Extra check API environment (CHECK_TIMEOUT_MS, NEGATIVE_CACHE, ...). */
  checkApiEnvironment?: Partial<CheckApiVariables>;
  /** Execution environments of the check API: invocations at once, one each (default 4). */
  checkApiConcurrency?: number;
  /**
   * Invocations at once in each check API environment (default 1, as Lambda runs them); more, as Lambda
   * Managed Instances run them, with CHECK_SLOT_BATCH set to it unless checkApiEnvironment names its own.
   */
  checkApiPerEnvironment?: number;
  /** Execution environments of the QuotaSync function (default 2). */
  quotaSyncConcurrency?: number;
  /**
   * How often the QuotaSync function's scheduled restore runs (rules lost from Redis written again from the
   * policy), as the stack's EventBridge schedule invokes it every minute. Default 60 s.
   */
  quotaRestoreIntervalMs?: number;
  /** The clock the functions decide by (default: the system's); tests pin it. */
  clock?: Clock;
  /**
   * The keys the Function URLs accept (AWS_IAM auth: every request signed with one of them), each standing
   * for a principal; default: LOCAL_CREDENTIAL alone.
   */
  credentials?: readonly LocalCredential[];
  /**
   * Every Function URL request as this caller, no signature checked (on AWS the URL checks it before the
   * function runs): for the bench, whose load generator does not sign.
   */
  trustedCaller?: FunctionUrlAuth["trustedCaller"];
}

/** Where the local stack keeps deferred sends until they are due. */
const DEFERRAL_PREFIX = "schedules/";

export interface LocalStack {
  endpoints: Endpoints;
  sqs: SQSClient;
  poller: SqsPoller;
  consumer: ReturnType<typeof wireCampaignConsumer>;
  /**
   * The local scheduler of deferred sends (objects in the emulator's bucket): fires every one due by the
   * stack's clock onto the campaign queue, returns how many. With polling on, it also runs every second.
   */
  fireDeferrals(): Promise<number>;
  /** The eligible instants of the deferred messages still waiting, ascending. */
  pendingDeferrals(): Promise<number[]>;
  /** The check API's execution environments; each runs one invocation at a time. */
  checkApiEnvironments: ReturnType<typeof wireCheckApi>[];
  stop(): Promise<void>;
}

export async function startLocalStack(options: LocalStackOptions = {}): Promise<LocalStack> {
  const region = options.region ?? "us-east-1";
  const bucket = options.bucket ?? "tollgate-local";
  const prefix = options.queuePrefix ?? "tollgate";
  // The SDK signs every request; the emulator accepts any credentials.
  process.env.AWS_ACCESS_KEY_ID ??= "local";
  process.env.AWS_SECRET_ACCESS_KEY ??= "local";
  // Powertools reads these from process.env: quiet by default here, louder when the caller asks.
  process.env.POWERTOOLS_LOG_LEVEL ??= "WARN";
  process.env.POWERTOOLS_METRICS_DISABLED ??= "true";

  if (options.writeEndpoints !== false) {
    const cleaned = await cleanUpAbandonedStack();
    if (cleaned) console.error(`[local] ${cleaned}`);
  }
  const redis = await startCluster(options.redisBasePort === undefined ? {} : { basePort: options.redisBasePort });
  // run in order on stop: what is started later goes to the front (poller, clients), servers stay last
  const stops: (() => Promise<unknown>)[] = [];
  if (redis.started)
    stops.push(() => stopCluster(options.redisBasePort === undefined ? {} : { basePort: options.redisBasePort }));
  try {
    // fauxqs's own startFauxqs() listens on 0.0.0.0 whatever its `host` option (that only names the host in
    // queue URLs): its app is listened on loopback here, so nothing outside this machine reaches it
    const fauxqs = buildFauxqs({ logger: false, host: "127.0.0.1" });
    const awsEndpoint = await fauxqs.listen({ port: options.awsPort ?? 0, host: "127.0.0.1" });
    stops.push(() => fauxqs.close());
    const { s3, sqs } = createAwsClients({ region, endpoint: awsEndpoint });
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    const visibility = String(options.visibilityTimeoutSeconds ?? 30);
    const maxReceiveCount = options.maxReceiveCount ?? 5;
    const campaignDlq = await createQueue(sqs, `${prefix}-campaign-dlq`, { MessageRetentionPeriod: "1209600" });
    const campaign = await createQueue(sqs, `${prefix}-campaign`, {
      VisibilityTimeout: visibility,
      RedrivePolicy: JSON.stringify({ deadLetterTargetArn: campaignDlq.arn, maxReceiveCount }),
    });
    const deliveryDlq = await createQueue(sqs, `${prefix}-delivery-dlq`, { MessageRetentionPeriod: "1209600" });
    const delivery = await createQueue(sqs, `${prefix}-delivery`, {
      RedrivePolicy: JSON.stringify({ deadLetterTargetArn: deliveryDlq.arn, maxReceiveCount: 5 }),
      ...options.deliveryQueueAttributes,
    });
    // the same environment contract as infra/functions.ts, on top of this shell's (REDIS_PASSWORD, ...)
    const variables: CommonVariables = {
      REDIS_NODES: redis.nodes.join(","),
      CONFIG_BUCKET: bucket,
      CAMPAIGN_REDELIVERY_SECONDS: String(Number(visibility) * maxReceiveCount),
      AWS_REGION: region,
      AWS_ENDPOINT_URL: awsEndpoint,
      // the decision archive: the objects Firehose writes on AWS, written to the emulator's bucket directly
      DECISION_ARCHIVE: `s3://${bucket}/${DEFAULT_ARCHIVE_PREFIX}`,
    };
    const shared = { ...process.env, ...variables };
    const clockOption = options.clock ? { clock: options.clock } : {};
    // the check API, and the same code as the QuotaSync function (POST /v1/quotas/sync alone), as
    // infra/functions.ts deploys them: each function its own execution environments and URL
    const environmentsWith = (count: number, routes: Partial<CheckApiVariables>) =>
      Array.from({ length: count }, () => {
        const environment = wireCheckApi(
          {
            ...shared,
            ...options.environment,
            ...options.checkApiEnvironment,
            ...routes,
          },
          clockOption,
        );
        stops.unshift(() => environment.cluster.quit());
        // after the servers stop taking requests (stops run front first): what the archive still holds
        stops.unshift(async () => environment.archive?.flush());
        return environment;
      });
    const perEnvironment = options.checkApiPerEnvironment ?? 1;
    const checkApiEnvironments = environmentsWith(
      options.checkApiConcurrency ?? 4,
      perEnvironment > 1 && options.checkApiEnvironment?.CHECK_SLOT_BATCH === undefined
        ? { CHECK_SLOT_BATCH: String(perEnvironment) }
        : {},
    );
    const quotaSyncEnvironments = environmentsWith(options.quotaSyncConcurrency ?? 2, {
      CHECK_API_ROUTES: "quota-sync",
    });
    // each environment's init phase, as Lambda runs it before the first invocation
    await Promise.all([...checkApiEnvironments, ...quotaSyncEnvironments].map((environment) => environment.warm()));
    const handlersOf = (wired: typeof checkApiEnvironments) => wired.map(({ handler }) => handler);
    // AWS_IAM auth, as infra/functions.ts deploys the URLs: a request not signed by a local key is a 403
    const auth = {
      credentials: options.credentials ?? [LOCAL_CREDENTIAL],
      ...(options.trustedCaller ? { trustedCaller: options.trustedCaller } : {}),
    };
    const functionUrl = await startFunctionUrlServer(
      handlersOf(checkApiEnvironments),
      options.functionUrlPort ?? 0,
      "tollgate-check-api",
      auth,
      perEnvironment,
    );
    stops.unshift(() => functionUrl.stop());
    const quotaSyncUrl = await startFunctionUrlServer(
      handlersOf(quotaSyncEnvironments),
      options.quotaSyncUrlPort ?? 0,
      "tollgate-quota-sync",
      auth,
    );
    stops.unshift(() => quotaSyncUrl.stop());
    // the minute's schedule of infra/functions.ts, on one QuotaSync environment
    const restoring = setInterval(() => {
      quotaSyncEnvironments[0]?.restoreQuotaRules().catch(() => {});
    }, options.quotaRestoreIntervalMs ?? 60_000);
    restoring.unref();
    stops.unshift(async () => clearInterval(restoring));
    const endpoints: Endpoints = {
      functionUrl: functionUrl.url,
      quotaSyncUrl: quotaSyncUrl.url,
      awsEndpoint,
      region,
      bucket,
      campaignQueueUrl: campaign.url,
      deliveryQueueUrl: delivery.url,
      deadLetterQueueUrl: campaignDlq.url,
      deliveryDeadLetterQueueUrl: deliveryDlq.url,
      redis: redis.nodes,
    };

    const consumerVariables: ConsumerVariables = {
      ...variables,
      DELIVERY_QUEUE_URL: delivery.url,
      DEAD_LETTER_QUEUE_URL: campaignDlq.url,
      // deferred sends wait in the bucket, fired by this stack's clock (EventBridge Scheduler's place)
      DEFERRALS: `s3://${bucket}/${DEFERRAL_PREFIX}`,
      // the consumer's view of the queues, from the queues' own settings (as infra/functions.ts does)
      CAMPAIGN_MAX_RECEIVE_COUNT: String(maxReceiveCount),
      ...(options.deliveryQueueAttributes?.MaximumMessageSize === undefined
        ? {}
        : { DELIVERY_MAX_MESSAGE_BYTES: options.deliveryQueueAttributes.MaximumMessageSize }),
    };
    const consumer = wireCampaignConsumer(
      { ...shared, ...consumerVariables, ...options.environment },
      { ...clockOption, ...(options.onOutcome ? { onOutcome: options.onOutcome } : {}) },
    );
    stops.unshift(() => consumer.cluster.quit());
    stops.unshift(async () => consumer.archive?.flush());
    const poller = new SqsPoller({
      sqs,
      queueUrl: campaign.url,
      queueArn: campaign.arn,
      region,
      handler: consumer.handler,
      batchSize: options.batchSize ?? 10,
      batchingWindowMs: options.batchingWindowMs ?? 0,
      concurrency: options.concurrency ?? 2,
      functionTimeoutMs: options.functionTimeoutMs ?? 60_000,
    });
    const schedules = new S3Schedules(s3, bucket, DEFERRAL_PREFIX);
    const campaignQueue = new SqsCampaignQueue(sqs, campaign.url);
    const stackClock = options.clock ?? systemClock;
    const fireDeferrals = () => schedules.fireDue(stackClock.now(), campaignQueue);
    if (options.poll !== false) {
      poller.start();
      let firing = false;
      const firer = setInterval(() => {
        if (firing) return;
        firing = true;
        fireDeferrals()
          .catch((error: unknown) => console.error(`[local] deferred sends not fired: ${(error as Error).message}`))
          .finally(() => {
            firing = false;
          });
      }, 1_000);
      firer.unref();
      stops.unshift(async () => clearInterval(firer));
    }
    stops.unshift(() => poller.stop());
    if (options.writeEndpoints !== false) {
      mkdirSync(dirname(ENDPOINTS_FILE), { recursive: true });
      writeFileSync(ENDPOINTS_FILE, `${JSON.stringify(endpoints, null, 2)}\n`);
      const redisBasePort = Number((redis.nodes[0] as string).split(":")[1]);
      writeStackRecord({ pid: process.pid, ...(redis.started ? { startedRedisBasePort: redisBasePort } : {}) });
      // removed first on stop: from then on nothing claims the stack is up
      stops.unshift(async () => removeStackFiles());
    }
    let stopped = false;
    return {
      endpoints,
      sqs,
      poller,
      consumer,
      fireDeferrals,
      pendingDeferrals: () => schedules.pending(),
      checkApiEnvironments,
      stop: async () => {
        if (stopped) return;
        stopped = true;
        for (const stop of stops) await stop();
      },
    };
  } catch (error) {
    // the same order as a normal stop: the poller and clients first, the servers last
    for (const stop of stops) await stop().catch(() => {});
    throw error;
  }
}

async function createQueue(
  sqs: SQSClient,
  name: string,
  attributes: Record<string, string>,
): Promise<{ url: string; arn: string }> {
  const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: name, Attributes: attributes }));
  const { Attributes } = await sqs.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["QueueArn"] }));
  return { url: QueueUrl as string, arn: Attributes?.QueueArn as string };
}

async function main(): Promise<void> {
  const stack = await startLocalStack({
    awsPort: Number(process.env.LOCAL_AWS_PORT ?? 4566),
    functionUrlPort: Number(process.env.LOCAL_FUNCTION_URL_PORT ?? 8787),
    quotaSyncUrlPort: Number(process.env.LOCAL_QUOTA_SYNC_URL_PORT ?? 8788),
    batchSize: Number(process.env.LOCAL_BATCH_SIZE ?? 10),
    batchingWindowMs: Number(process.env.LOCAL_BATCHING_WINDOW_MS ?? 0),
  });
  const shutdown = async () => {
    console.log("\nstopping ...");
    await stack.stop();
    console.log("stopped");
    process.exit(0);
  };
  // before saying it is up: a Ctrl-C right after the message must still stop everything
  process.once("SIGINT", shutdown);
  process.once("SIGTERM", shutdown);
  console.log(
    `local stack up; endpoints in ${ENDPOINTS_FILE}:\n${JSON.stringify(stack.endpoints, null, 2)}\nCtrl-C stops it.`,
  );
}

if (isMain(import.meta)) {
  main().catch((error: unknown) => {
    console.error(error instanceof Error ? error.message : error);
    process.exitCode = 1;
  });
}
