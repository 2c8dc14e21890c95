// The Lambdas: the campaign consumer (SQS event source), the check API (Function URL, AWS_IAM), and the same
// code again as QuotaSync, serving quota sync alone for Quotas clients outside the VPC (Function URL, AWS_IAM).
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Duration, type RemovalPolicy, Stack } from "aws-cdk-lib";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as events from "aws-cdk-lib/aws-events";
import * as targets from "aws-cdk-lib/aws-events-targets";
import * as iam from "aws-cdk-lib/aws-iam";
import * as lambda from "aws-cdk-lib/aws-lambda";
import { SqsEventSource } from "aws-cdk-lib/aws-lambda-event-sources";
import * as nodejs from "aws-cdk-lib/aws-lambda-nodejs";
import * as logs from "aws-cdk-lib/aws-logs";
import * as scheduler from "aws-cdk-lib/aws-scheduler";
import { Construct } from "constructs";
import type { CheckApiVariables, CommonVariables, ConsumerVariables } from "../functions/app/environment.ts";
import type { Archive } from "./archive.ts";
import type { Cache } from "./cache.ts";
import { checkManagedInstancesRuntime, type TollgateConfig } from "./config.ts";
import type { Network } from "./network.ts";
import { CAMPAIGN_MAX_RECEIVE_COUNT, DELIVERY_MAX_MESSAGE_BYTES, type Storage } from "./storage.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/** What `roaring-wasm` needs at run time: its loader, the WebAssembly module, and the package manifest. */
const WASM_FILES = ["index.js", "index.wasm", "package.json", "LICENSE"];

/**
 * esbuild bundles each handler into one ESM file, the AWS SDK included. Nothing in the asset is native code,
 * so it loads on either architecture and any Node the runtime runs, whatever machine synthesized it.
 * `roaring-wasm` stays external and its files are copied beside the bundle: bundled, its loader would look
 * for `index.wasm` through `__dirname`, which ESM lacks. The Lua scripts (each entry with its folder of parts)
 * are copied beside the bundle, where lua-scripts.ts joins them at init.
 */
export const bundling: nodejs.BundlingOptions = {
  format: nodejs.OutputFormat.ESM,
  target: "node24",
  mainFields: ["module", "main"],
  banner: "import { createRequire } from 'module'; const require = createRequire(import.meta.url);",
  externalModules: ["roaring-wasm"],
  sourceMap: true,
  commandHooks: {
    beforeBundling: () => [],
    beforeInstall: () => [],
    afterBundling: (inputDir: string, outputDir: string) => [
      `cp -r "${inputDir}/lua" "${outputDir}/lua"`,
      `mkdir -p "${outputDir}/node_modules/roaring-wasm"`,
      `cp ${WASM_FILES.map((file) => `"${inputDir}/node_modules/roaring-wasm/${file}"`).join(" ")} "${outputDir}/node_modules/roaring-wasm/"`,
    ],
  },
};

/** Lambda stores strings only: the variables left unset are left out. */
function lambdaEnvironment(variables: Record<string, string | undefined>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(variables).filter((entry): entry is [string, string] => entry[1] !== undefined),
  );
}

/**
 * Read the policy and the bitmaps, nothing else in the bucket: GetObject (HEAD included) on three prefixes;
 * write only the copies of accepted bitmaps and policies (`accepted/`, which every container's shrink check
 * compares with, and a container started after a refused upload serves).
 * ListBucket on the bucket, because without it S3 answers a GET of a missing object 403, not 404: the
 * shrink check reads an `accepted/` record that does not exist yet on a first deployment and for every
 * new segment, and a 403 there would fail the rules load of a cold container.
 */
function rulesAccess(storage: Storage): iam.PolicyStatement[] {
  return [
    new iam.PolicyStatement({ actions: ["s3:ListBucket"], resources: [storage.bucket.bucketArn] }),
    new iam.PolicyStatement({
      actions: ["s3:GetObject"],
      resources: [
        storage.bucket.arnForObjects("config/*"),
        storage.bucket.arnForObjects("segments/*"),
        storage.bucket.arnForObjects("accepted/*"),
        storage.bucket.arnForObjects("store/*"),
      ],
    }),
    new iam.PolicyStatement({
      actions: ["s3:PutObject"],
      resources: [storage.bucket.arnForObjects("accepted/*"), storage.bucket.arnForObjects("store/*")],
    }),
  ];
}

export interface FunctionsProps {
  config: TollgateConfig;
  network: Network;
  cache: Cache;
  storage: Storage;
  /** The decision archive's stream: every function puts its decisions there. */
  archive: Archive;
  removalPolicy: RemovalPolicy;
}

export class Functions extends Construct {
  readonly consumer: nodejs.NodejsFunction;
  readonly checkApi: nodejs.NodejsFunction;
  readonly checkApiUrl: lambda.FunctionUrl;
  /**
   * What the Function URL invokes: the `live` alias with provisioned concurrency or on Lambda Managed
   * Instances (an invocation runs a published version there), else the function.
   */
  readonly checkApiTarget: lambda.IFunction;
  /** With `checkApiCompute` = managed-instances: the EC2 capacity the check API runs on, in the VPC. */
  readonly checkApiCapacity: lambda.CapacityProvider | undefined;
  /**
   * The check API's code serving `POST /v1/quotas/sync` alone (`CHECK_API_ROUTES=quota-sync`), a function of
   * its own: its URL is what `grantQuotaSync` grants, and its concurrency is not the check API's.
   */
  readonly quotaSync: nodejs.NodejsFunction;
  readonly quotaSyncUrl: lambda.FunctionUrl;
  /** The schedule that invokes QuotaSync every minute to restore quota rules lost from Redis. */
  readonly quotaRestore: events.Rule;
  /** Where the consumer creates the one-time schedules of sends deferred past 15 minutes. */
  readonly deferralGroup: scheduler.ScheduleGroup;
  /** The role those schedules send to the campaign queue with. */
  readonly deferralRole: iam.Role;

  constructor(scope: Construct, id: string, props: FunctionsProps) {
    super(scope, id);
    const { config, network, cache, storage, archive } = props;
    const common = {
      runtime: lambda.Runtime.NODEJS_24_X,
      architecture: config.architecture === "arm64" ? lambda.Architecture.ARM_64 : lambda.Architecture.X86_64,
      vpc: network.vpc,
      vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
      securityGroups: [network.lambdaSecurityGroup],
      tracing: config.tracing ? lambda.Tracing.ACTIVE : lambda.Tracing.DISABLED,
      projectRoot: root,
      depsLockFilePath: join(root, "package-lock.json"),
      bundling,
    };
    // typed by the functions' own environment contract: a variable they no longer read fails the typecheck
    const variables: CommonVariables = {
      REDIS_NODES: cache.configurationEndpoint,
      REDIS_TLS: "true",
      REDIS_AUTH_SECRET_ARN: cache.authToken.secretArn,
      CONFIG_BUCKET: storage.bucket.bucketName,
      // named sends are kept this long so a redelivered campaign message is recognised
      CAMPAIGN_REDELIVERY_SECONDS: String(storage.campaignRedeliverySeconds),
      DECISION_ARCHIVE: `firehose:${archive.streamName}`,
    };
    // deferred sends past SQS's 15-minute delay: one-time schedules in their own group, sent to the campaign
    // queue by a role that may send there (and to the schedules' DLQ) and do nothing else
    this.deferralGroup = new scheduler.ScheduleGroup(this, "DeferralSchedules", {
      scheduleGroupName: `${Stack.of(this).stackName}-deferrals`,
      removalPolicy: props.removalPolicy,
    });
    this.deferralRole = new iam.Role(this, "DeferralTargetRole", {
      description: "Tollgate: EventBridge Scheduler sends deferred campaign batches to the campaign queue",
      assumedBy: new iam.ServicePrincipal("scheduler.amazonaws.com", {
        conditions: { StringEquals: { "aws:SourceAccount": Stack.of(this).account } },
      }),
    });
    storage.campaignQueue.grantSendMessages(this.deferralRole);
    storage.deferralDeadLetters.grantSendMessages(this.deferralRole);
    const consumerVariables: ConsumerVariables = {
      ...variables,
      DEFERRALS: "aws",
      CAMPAIGN_QUEUE_URL: storage.campaignQueue.queueUrl,
      CAMPAIGN_QUEUE_ARN: storage.campaignQueue.queueArn,
      DEFERRAL_SCHEDULE_GROUP: this.deferralGroup.scheduleGroupName,
      DEFERRAL_ROLE_ARN: this.deferralRole.roleArn,
      DEFERRAL_DLQ_ARN: storage.deferralDeadLetters.queueArn,
      DELIVERY_QUEUE_URL: storage.deliveryQueue.queueUrl,
      DEAD_LETTER_QUEUE_URL: storage.campaignDeadLetters.queueUrl,
      DELIVERY_BATCH_SIZE: String(config.deliveryBatchSize),
      DELIVERY_MAX_MESSAGE_BYTES: String(DELIVERY_MAX_MESSAGE_BYTES),
      CAMPAIGN_MAX_RECEIVE_COUNT: String(CAMPAIGN_MAX_RECEIVE_COUNT),
    };
    const checkApiVariables: CheckApiVariables = variables;
    const managed = config.checkApiCompute === "managed-instances";
    if (managed) checkManagedInstancesRuntime(common.runtime.name);
    // read by Node and Powertools, not by Tollgate's code: outside the contract
    const node = { NODE_OPTIONS: "--enable-source-maps" };
    const logGroup = (name: string) =>
      new logs.LogGroup(this, `${name}Logs`, {
        retention: config.logRetentionDays as logs.RetentionDays,
        removalPolicy: props.removalPolicy,
      });

    this.consumer = new nodejs.NodejsFunction(this, "CampaignConsumer", {
      ...common,
      entry: join(root, "functions/entry/campaign-consumer-lambda.ts"),
      description: "Tollgate: decides campaign batches and forwards the approved sends",
      memorySize: config.consumerMemoryMb,
      timeout: Duration.seconds(config.consumerTimeoutSeconds),
      logGroup: logGroup("CampaignConsumer"),
      environment: lambdaEnvironment({ ...consumerVariables, ...node }),
    });
    this.consumer.addEventSource(
      new SqsEventSource(storage.campaignQueue, {
        batchSize: config.batchSize,
        ...(config.batchingWindowSeconds > 0
          ? { maxBatchingWindow: Duration.seconds(config.batchingWindowSeconds) }
          : {}),
        reportBatchItemFailures: true,
        maxConcurrency: config.maxConcurrency,
      }),
    );
    for (const statement of rulesAccess(storage)) this.consumer.addToRolePolicy(statement);
    storage.deliveryQueue.grantSendMessages(this.consumer);
    storage.campaignDeadLetters.grantSendMessages(this.consumer);
    // deferrals: delayed messages to its own queue, schedules created in the group (never updated or
    // deleted: they delete themselves once fired), and the target role passed to the scheduler only
    storage.campaignQueue.grantSendMessages(this.consumer);
    this.deferralGroup.grant(this.consumer, "scheduler:CreateSchedule");
    this.consumer.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ["iam:PassRole"],
        resources: [this.deferralRole.roleArn],
        conditions: { StringEquals: { "iam:PassedToService": "scheduler.amazonaws.com" } },
      }),
    );
    archive.grantPut(this.consumer);
    cache.authToken.grantRead(this.consumer);

    // The check API's code, as the check API (every route) or as QuotaSync (quota sync alone)
    const checkApiFunction = (
      id: string,
      description: string,
      variables: CheckApiVariables,
      reserved?: number,
      onCapacity = false,
    ) => {
      // on a capacity provider the instances are in the VPC (its subnets and security group), not the function
      const { vpc: _, vpcSubnets: __, securityGroups: ___, ...placeless } = common;
      const fn = new nodejs.NodejsFunction(this, id, {
        ...(onCapacity ? placeless : common),
        entry: join(root, "functions/entry/check-api-lambda.ts"),
        description,
        memorySize: config.checkApiMemoryMb,
        timeout: Duration.seconds(10),
        logGroup: logGroup(id),
        reservedConcurrentExecutions: reserved,
        // at 1,000 requests/s, one EMF document per request is about $500 a month of log ingestion
        environment: lambdaEnvironment({
          ...variables,
          ...node,
          ...(config.checkApiMetrics ? {} : { POWERTOOLS_METRICS_DISABLED: "true" }),
        }),
      });
      for (const statement of rulesAccess(storage)) fn.addToRolePolicy(statement);
      archive.grantPut(fn);
      cache.authToken.grantRead(fn);
      return fn;
    };
    this.checkApi = checkApiFunction(
      "CheckApi",
      "Tollgate: frequency checks and rate limits behind a Function URL",
      // several invocations at once per environment: the checks of one hash slot share a script call
      managed
        ? { ...checkApiVariables, CHECK_SLOT_BATCH: String(config.checkApiEnvironmentConcurrency) }
        : checkApiVariables,
      config.checkApiReservedConcurrency,
      managed,
    );
    this.checkApiCapacity = managed ? this.capacityFor(this.checkApi, config, network) : undefined;
    const target: lambda.Function | lambda.Alias =
      managed || config.checkApiProvisionedConcurrency > 0
        ? new lambda.Alias(this, "CheckApiLive", {
            aliasName: "live",
            version: this.checkApi.currentVersion,
            ...(managed ? {} : { provisionedConcurrentExecutions: config.checkApiProvisionedConcurrency }),
          })
        : this.checkApi;
    // AWS_IAM: callers sign with SigV4 and need lambda:InvokeFunctionUrl and lambda:InvokeFunction (grantCheckApi)
    this.checkApiUrl = target.addFunctionUrl({ authType: lambda.FunctionUrlAuthType.AWS_IAM });
    this.checkApiTarget = target;
    // Quotas clients outside the VPC: the same code (one asset) serving quota sync alone, behind a URL of its
    // own. A function, not an alias of the check API: an alias shares the function's reserved concurrency, so
    // a fleet's syncs (every 50 ms per client instance) would take what the checks reserved, and throttle them.
    // Unreserved: it draws on the account's pool.
    this.quotaSync = checkApiFunction(
      "QuotaSync",
      "Tollgate: POST /v1/quotas/sync alone, for Quotas clients outside the VPC",
      { ...checkApiVariables, CHECK_API_ROUTES: "quota-sync" },
    );
    this.quotaSyncUrl = this.quotaSync.addFunctionUrl({ authType: lambda.FunctionUrlAuthType.AWS_IAM });
    // every minute, rules lost with Redis's state (FLUSHALL, a node back empty) are restored from the policy,
    // for the clients syncing straight to Redis (the sync route restores its own at once)
    this.quotaRestore = new events.Rule(this, "QuotaRulesRestore", {
      description: "Tollgate: restore quota rules lost from Redis, from the policy in S3",
      schedule: events.Schedule.rate(Duration.minutes(1)),
      targets: [new targets.LambdaFunction(this.quotaSync, { retryAttempts: 0 })],
    });
  }

  /**
   * Lambda Managed Instances for the check API: a capacity provider on the VPC's isolated subnets with the
   * functions' security group (the cache admits it), of the function's architecture, at most
   * `checkApiMaxVCpus` vCPUs, and `checkApiEnvironmentConcurrency` invocations at once per environment.
   */
  private capacityFor(fn: lambda.Function, config: TollgateConfig, network: Network): lambda.CapacityProvider {
    const capacity = new lambda.CapacityProvider(this, "CheckApiCapacity", {
      subnets: network.vpc.isolatedSubnets,
      securityGroups: [network.lambdaSecurityGroup],
      architectures: [fn.architecture],
      maxVCpuCount: config.checkApiMaxVCpus,
    });
    capacity.addFunction(fn, { perExecutionEnvironmentMaxConcurrency: config.checkApiEnvironmentConcurrency });
    return capacity;
  }

  /**
   * Lets a role or user call the check API's Function URL: `lambda:InvokeFunctionUrl` on the URL's target
   * with the condition `lambda:FunctionUrlAuthType = AWS_IAM`, and `lambda:InvokeFunction` with
   * `lambda:InvokedViaFunctionUrl = true` (both actions Function URLs now require). On the alias when the URL
   * is the alias's: a grant on the unqualified function ARN does not cover an alias. IAM cannot scope a
   * Function URL grant to a path: the grantee may call every route.
   */
  grantCheckApi(grantee: iam.IGrantable): iam.Grant {
    return this.checkApiTarget.grantInvokeUrl(grantee);
  }

  /**
   * Lets a role or user call `POST /v1/quotas/sync` and nothing else: the same two statements as
   * `grantCheckApi`, on the QuotaSync function, which serves quota sync alone.
   */
  grantQuotaSync(grantee: iam.IGrantable): iam.Grant {
    return this.quotaSync.grantInvokeUrl(grantee);
  }
}
