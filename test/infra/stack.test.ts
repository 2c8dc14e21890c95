// The CDK app, verified the way a reviewer would before a first deploy: `cdk synth` offline with no
// credentials, cdk-nag clean, the properties that matter asserted on the template, and the bundles that
// synth built loaded and invoked.
import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { CreateBucketCommand } from "@aws-sdk/client-s3";
import { Match, Template } from "aws-cdk-lib/assertions";
import * as iam from "aws-cdk-lib/aws-iam";
import { beforeAll, describe, expect, it } from "vitest";
import { uploadObject } from "../../functions/app/operator-actions.ts";
import { buildApp } from "../../infra/app.ts";
import { functionUrlEvent } from "../../scripts/local/function-url-server.ts";
import { withLocalTenant } from "../../scripts/local/local-principals.ts";
import { lambdaContext } from "../../scripts/local/sqs-poller.ts";
import { useAwsEmulator } from "../support/aws-emulator.ts";
import { clusterPorts } from "../support/cluster.ts";
import { invokeOnNode24 } from "../support/node24.ts";
import { localIam } from "../support/tenants.ts";

const execFileAsync = promisify(execFile);
type Resources = Record<string, { Type: string; Properties: Record<string, unknown> }>;

let outdir: string;
let template: Template;
let resources: Resources;
const ofType = (type: string) => Object.entries(resources).filter(([, r]) => r.Type === type);

beforeAll(async () => {
  outdir = mkdtempSync(join(tmpdir(), "tollgate-cdk-"));
  // no credentials, no lookups: what a fresh clone has
  const env = { ...process.env };
  for (const name of [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "CDK_DEFAULT_ACCOUNT",
  ])
    delete env[name];
  await execFileAsync("npx", ["cdk", "synth", "--quiet", "--output", outdir, "-c", "tollgate:profile=prod"], {
    env,
    timeout: 240_000,
  });
  const json = JSON.parse(readFileSync(join(outdir, "Tollgate.template.json"), "utf8")) as { Resources: Resources };
  resources = json.Resources;
  template = Template.fromJSON(json);
}, 300_000);

describe("cdk synth", () => {
  it("runs offline with no credentials and writes the template and the bundles", () => {
    expect(ofType("AWS::Lambda::Function").length).toBeGreaterThanOrEqual(3);
  });

  it("passes cdk-nag (AwsSolutions, Serverless) with every acknowledgement reasoned, and fails without them", () => {
    const clean = buildApp({ "aws:cdk:bundling-stacks": [] });
    expect(() => clean.app.synth()).not.toThrow();
    const bare = buildApp({ "aws:cdk:bundling-stacks": [] }, { acknowledge: false });
    expect(() => bare.app.synth()).toThrow(/AwsSolutions-IAM4|AwsSolutions-L1|Serverless-LambdaDLQ/);
  });
});

describe("template", () => {
  it("has a cluster-mode Redis with Multi-AZ, failover, TLS, encryption at rest and AUTH", () => {
    template.hasResourceProperties("AWS::ElastiCache::ReplicationGroup", {
      Engine: "valkey",
      NumNodeGroups: 3,
      ReplicasPerNodeGroup: 1,
      MultiAZEnabled: true,
      AutomaticFailoverEnabled: true,
      TransitEncryptionEnabled: true,
      AtRestEncryptionEnabled: true,
      AuthToken: Match.anyValue(),
      Port: 6380,
      LogDeliveryConfigurations: Match.arrayWith([
        Match.objectLike({ LogType: "slow-log" }),
        Match.objectLike({ LogType: "engine-log" }),
      ]),
    });
    template.hasResourceProperties("AWS::ElastiCache::ParameterGroup", {
      Properties: { "cluster-enabled": "yes", "maxmemory-policy": "noeviction" },
    });
    // only the Lambdas' security group may reach Redis
    template.hasResourceProperties("AWS::EC2::SecurityGroupIngress", {
      FromPort: 6380,
      ToPort: 6380,
      SourceSecurityGroupId: Match.anyValue(),
    });
  });

  it("reaches S3, SQS, Secrets Manager and X-Ray through VPC endpoints, with no NAT", () => {
    expect(ofType("AWS::EC2::NatGateway")).toHaveLength(0);
    const services = ofType("AWS::EC2::VPCEndpoint").map(([, e]) => JSON.stringify(e.Properties.ServiceName));
    for (const service of ["s3", "sqs", "secretsmanager", "xray"])
      expect(
        services.some((name) => name.includes(`.${service}`)),
        service,
      ).toBe(true);
  });

  it("runs the Lambdas (consumer, check API, QuotaSync, cache rotation) in the VPC's private subnets, on nodejs24.x, with tracing and log retention", () => {
    const isolated = new Set(
      ofType("AWS::EC2::Subnet")
        .filter(([, r]) => JSON.stringify(r.Properties.Tags).includes("Isolated"))
        .map(([id]) => id),
    );
    expect(isolated.size).toBeGreaterThanOrEqual(2);
    // ours, not CDK's own custom resource handlers (which run whatever runtime CDK picks)
    const functions = ofType("AWS::Lambda::Function").filter(([id]) => !id.includes("CustomResourceProvider"));
    // the consumer, the check API, QuotaSync and the cache passwords' rotation
    expect(functions).toHaveLength(4);
    expect(functions.map(([, r]) => r.Properties.Runtime)).toEqual(functions.map(() => "nodejs24.x"));
    for (const [, fn] of functions) {
      const subnets = (fn.Properties.VpcConfig as { SubnetIds: { Ref: string }[] }).SubnetIds.map((s) => s.Ref);
      expect(subnets.length).toBeGreaterThanOrEqual(2);
      expect(subnets.every((s) => isolated.has(s))).toBe(true);
      expect(fn.Properties.TracingConfig).toEqual({ Mode: "Active" });
      expect(fn.Properties.LoggingConfig).toBeDefined();
    }
    template.allResourcesProperties("AWS::Logs::LogGroup", { RetentionInDays: 30 });
  });

  it("consumes the campaign queue with partial batch responses, a visibility timeout at least 6x the function's", () => {
    template.hasResourceProperties("AWS::Lambda::EventSourceMapping", {
      FunctionResponseTypes: ["ReportBatchItemFailures"],
      BatchSize: 10,
      ScalingConfig: { MaximumConcurrency: 20 },
    });
    const [, consumer] = ofType("AWS::Lambda::Function").find(([id]) => id.includes("CampaignConsumer")) ?? [];
    const [, campaign] =
      ofType("AWS::SQS::Queue").find(([id]) => id.startsWith("StorageCampaign") && !id.includes("Dead")) ?? [];
    expect(Number(campaign?.Properties.VisibilityTimeout)).toBeGreaterThanOrEqual(
      6 * Number(consumer?.Properties.Timeout),
    );
  });

  it("gives every source queue a DLQ (maxReceiveCount >= 5, longer retention) and encrypts every queue", () => {
    const queues = ofType("AWS::SQS::Queue");
    const sources = queues.filter(([, q]) => q.Properties.RedrivePolicy);
    expect(sources).toHaveLength(2);
    for (const [, source] of sources) {
      const policy = source.Properties.RedrivePolicy as {
        maxReceiveCount: number;
        deadLetterTargetArn: { "Fn::GetAtt": [string] };
      };
      expect(policy.maxReceiveCount).toBeGreaterThanOrEqual(5);
      const dlq = resources[policy.deadLetterTargetArn["Fn::GetAtt"][0]] as Resources[string];
      expect(Number(dlq.Properties.MessageRetentionPeriod)).toBeGreaterThan(
        Number(source.Properties.MessageRetentionPeriod),
      );
    }
    for (const [, queue] of queues) expect(queue.Properties.SqsManagedSseEnabled).toBe(true);
    // SSL only on every queue
    expect(ofType("AWS::SQS::QueuePolicy").length).toBe(queues.length);
  });

  it("serves the check API through a Function URL with AWS_IAM auth and no CORS", () => {
    template.hasResourceProperties("AWS::Lambda::Url", { AuthType: "AWS_IAM", Cors: Match.absent() });
  });

  it("keeps the bucket private, versioned, SSL-only, logged, and expires old versions", () => {
    template.hasResourceProperties("AWS::S3::Bucket", {
      VersioningConfiguration: { Status: "Enabled" },
      PublicAccessBlockConfiguration: {
        BlockPublicAcls: true,
        BlockPublicPolicy: true,
        IgnorePublicAcls: true,
        RestrictPublicBuckets: true,
      },
      LoggingConfiguration: Match.objectLike({ LogFilePrefix: "config/" }),
      LifecycleConfiguration: {
        Rules: Match.arrayWith([Match.objectLike({ NoncurrentVersionExpiration: Match.anyValue() })]),
      },
    });
    template.hasResourceProperties("AWS::S3::BucketPolicy", {
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({ Effect: "Deny", Condition: { Bool: { "aws:SecureTransport": "false" } } }),
        ]),
      },
    });
  });

  it("scopes every IAM statement to named resources, except the actions AWS offers only on *", () => {
    const starOnly = new Set(["xray:PutTraceSegments", "xray:PutTelemetryRecords", "secretsmanager:GetRandomPassword"]);
    for (const [, policy] of ofType("AWS::IAM::Policy")) {
      for (const statement of (
        policy.Properties.PolicyDocument as { Statement: { Action: string | string[]; Resource: unknown }[] }
      ).Statement) {
        const actions = ([] as string[]).concat(statement.Action);
        if (statement.Resource === "*")
          expect(
            actions.every((action) => starOnly.has(action)),
            actions.join(),
          ).toBe(true);
        expect(
          actions.some((action) => action.includes("*") && !action.startsWith("xray")),
          actions.join(),
        ).toBe(false);
      }
    }
  });

  it("lets every function list the config bucket, so a missing accepted/ record reads as 404, not 403", () => {
    const roles = new Set<string>();
    for (const [, policy] of ofType("AWS::IAM::Policy")) {
      const document = policy.Properties.PolicyDocument as { Statement: { Action: string | string[] }[] };
      const lists = document.Statement.some((statement) =>
        ([] as string[]).concat(statement.Action).includes("s3:ListBucket"),
      );
      if (lists) for (const role of policy.Properties.Roles as unknown[]) roles.add(JSON.stringify(role));
    }
    // the three functions', and the archive's Firehose role (its S3 destination, as AWS documents it)
    expect(roles.size).toBe(4);
  });

  it("has the alarms an operator needs and outputs what a user needs", () => {
    const alarms = ofType("AWS::CloudWatch::Alarm").map(
      ([, a]) => `${a.Properties.Namespace}/${a.Properties.MetricName}`,
    );
    expect(alarms).toEqual(
      expect.arrayContaining([
        "AWS/SQS/ApproximateNumberOfMessagesVisible",
        "AWS/Lambda/Errors",
        "AWS/ElastiCache/DatabaseMemoryUsagePercentage",
        "AWS/ElastiCache/EngineCPUUtilization",
        "AWS/SQS/ApproximateAgeOfOldestMessage",
      ]),
    );
    expect(ofType("AWS::CloudWatch::Dashboard")).toHaveLength(1);
    for (const output of [
      "FunctionUrl",
      "QuotaSyncUrl",
      "CampaignQueueUrl",
      "DeliveryQueueUrl",
      "ConfigBucket",
      "RedisConfigurationEndpoint",
      "RedisAuthSecretArn",
    ])
      template.hasOutput(output, {});
  });

  it("grants a caller of the check API both actions Function URLs require", () => {
    const { stack } = buildApp({ "aws:cdk:bundling-stacks": [] });
    const caller = new iam.Role(stack, "Caller", { assumedBy: new iam.AccountRootPrincipal() });
    stack.functions.grantCheckApi(caller);
    const statements = Template.fromStack(stack).findResources("AWS::IAM::Policy");
    const actions = Object.values(statements).flatMap((p) =>
      (p.Properties.PolicyDocument.Statement as { Action: string | string[] }[]).flatMap((s) =>
        ([] as string[]).concat(s.Action),
      ),
    );
    expect(actions).toEqual(expect.arrayContaining(["lambda:InvokeFunctionUrl", "lambda:InvokeFunction"]));
  });
});

describe("the bundles synth built", () => {
  // the policy names the tenants every check API request is authorized by: a bucket with one in it
  const emulator = useAwsEmulator();
  const bucket = `bundles-${Date.now()}`;
  const assetOf = (logicalIdPart: string) => {
    const found = ofType("AWS::Lambda::Function").find(([id]) => id.includes(logicalIdPart));
    if (!found) throw new Error(`no function ${logicalIdPart} in the template`);
    const key = (found[1].Properties.Code as { S3Key: string }).S3Key.replace(/\.zip$/, "");
    return join(outdir, `asset.${key}`, "index.mjs");
  };

  type CheckApiBundle = { handler: (e: unknown, c: unknown) => Promise<{ statusCode: number; body: string }> };
  /** A fresh module instance of the check API bundle: what one new execution environment runs at init. */
  const coldCheckApi = (environment: string) =>
    import(`${pathToFileURL(assetOf("CheckApi")).href}?environment=${environment}`) as Promise<CheckApiBundle>;
  // signed by the local principal, whom the bucket's policy makes a tenant
  const limitEvent = (limit: object) =>
    functionUrlEvent("POST", "/v1/limit", JSON.stringify(limit), {}, "127.0.0.1", localIam);

  beforeAll(async () => {
    await emulator.s3.send(new CreateBucketCommand({ Bucket: bucket }));
    const policy = { version: "bundles.1", channels: ["push"], segments: [], default: { name: "all", caps: {} } };
    await uploadObject(emulator.s3, bucket, "config/policy.json", JSON.stringify(withLocalTenant(policy)));
    Object.assign(process.env, {
      REDIS_NODES: clusterPorts
        .slice(0, 3)
        .map((port) => `127.0.0.1:${port}`)
        .join(","),
      CONFIG_BUCKET: bucket,
      AWS_ENDPOINT_URL: emulator.endpoint,
      DELIVERY_QUEUE_URL: "http://127.0.0.1:1/000000000000/delivery",
      DEAD_LETTER_QUEUE_URL: "http://127.0.0.1:1/000000000000/dlq",
      KEY_NAMESPACE: `bundle-${Date.now()}`,
    });
  });

  it("load on Node 24, the declared runtime, and answer their first invocation", async () => {
    // what Lambda runs, not the test's own Node: a native addon built for another Node failed only there
    const env = {
      REDIS_NODES: process.env.REDIS_NODES as string,
      CONFIG_BUCKET: bucket,
      AWS_ENDPOINT_URL: emulator.endpoint,
      AWS_ACCESS_KEY_ID: "local",
      AWS_SECRET_ACCESS_KEY: "local",
      DELIVERY_QUEUE_URL: "http://127.0.0.1:1/000000000000/delivery",
      DEAD_LETTER_QUEUE_URL: "http://127.0.0.1:1/000000000000/dlq",
      KEY_NAMESPACE: `bundle24-${Date.now()}`,
    };
    const limit = { key: "bundle", algorithm: "gcra", burst: 1, count: 1, periodMs: 1000 };
    const checkApi = await invokeOnNode24(assetOf("CheckApi"), [limitEvent(limit)], { env });
    expect(checkApi.error).toBeUndefined();
    expect(checkApi.node).toMatch(/^v24\./);
    // the first request of a cold environment: no warm-up call before it
    const [reply] = checkApi.replies as { statusCode: number; body: string }[];
    expect(reply?.statusCode).toBe(200);
    expect(JSON.parse(reply?.body ?? "{}")).toMatchObject({ allowed: true, limit: 2, remaining: 1 });
    // QuotaSync is the same bundle, told by its variable to serve quota sync alone
    expect(assetOf("QuotaSync")).toBe(assetOf("CheckApi"));
    const quotaSync = await invokeOnNode24(assetOf("QuotaSync"), [limitEvent(limit)], {
      env: { ...env, CHECK_API_ROUTES: "quota-sync" },
    });
    expect(quotaSync.error).toBeUndefined();
    expect((quotaSync.replies as { statusCode: number }[])[0]?.statusCode).toBe(404);
    const consumer = await invokeOnNode24(assetOf("CampaignConsumer"), [{ Records: [] }], { env });
    expect(consumer.error).toBeUndefined();
    expect(consumer.replies).toEqual([{ batchItemFailures: [] }]);
  }, 240_000);

  it("hold no native code, so they load on arm64 (declared) as on the x86_64 that built them", () => {
    const declared = ofType("AWS::Lambda::Function")
      .filter(([id]) => id.includes("CheckApi") || id.includes("CampaignConsumer"))
      .map(([, fn]) => fn.Properties.Architectures);
    expect(declared).toEqual([["arm64"], ["arm64"]]);
    for (const part of ["CheckApi", "CampaignConsumer"]) {
      const files = readdirSync(dirname(assetOf(part)), { recursive: true, withFileTypes: true }).filter((entry) =>
        entry.isFile(),
      );
      expect(files.some((file) => file.name === "index.wasm")).toBe(true);
      for (const file of files) {
        const path = join(file.parentPath, file.name);
        const magic = readFileSync(path).subarray(0, 4).toString("hex");
        // ELF (Linux), Mach-O (macOS, both byte orders), PE (Windows): what a native addon would be
        expect(["7f454c46", "cffaedfe", "feedfacf", "cafebabe"].includes(magic) || magic.startsWith("4d5a"), path).toBe(
          false,
        );
        expect(file.name.endsWith(".node"), path).toBe(false);
      }
    }
  });

  it("answer the first request of every cold environment with 200, many environments starting at once", async () => {
    // a burst of traffic scales out: the new environments run their init at once, then each takes its
    // first request (in one process, an init overlapping another's request would only measure this test)
    const environments = 4;
    const limit = { key: "cold-burst", algorithm: "fixed-window", max: 1000, windowMs: 3_600_000 };
    const cold = await Promise.all(Array.from({ length: environments }, (_, i) => coldCheckApi(`cold-${i}`)));
    const replies = await Promise.all(cold.map(({ handler }) => handler(limitEvent(limit), lambdaContext(10_000))));
    expect(replies.map((reply) => reply.statusCode)).toEqual(replies.map(() => 200));
    // every first request was counted once: none lost, none charged twice
    const { handler } = await coldCheckApi("peek");
    const peek = await handler(limitEvent({ ...limit, cost: 0 }), lambdaContext(10_000));
    expect(JSON.parse(peek.body)).toMatchObject({ allowed: true, remaining: 1000 - environments });
  }, 120_000);
});
