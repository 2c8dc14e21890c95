// Each profile synthesized in memory with cdk.json's feature flags (bundling skipped: stack.test.ts and
// bundle-node24.test.ts build the bundles): cdk-nag passes, and the properties that differ are asserted.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Template } from "aws-cdk-lib/assertions";
import { describe, expect, it } from "vitest";
import { buildApp } from "../../infra/app.ts";

const cdkJson = JSON.parse(readFileSync(join(import.meta.dirname, "../../cdk.json"), "utf8")) as {
  context: Record<string, unknown>;
};
type Resources = Record<string, { Type: string; Properties: Record<string, unknown>; DeletionPolicy?: string }>;

/** The template of a synth with `context` on top of cdk.json's; throws when cdk-nag reports an error. */
function synth(context: Record<string, unknown>): { template: Template; resources: Resources } {
  const { app, stack } = buildApp({ ...cdkJson.context, "aws:cdk:bundling-stacks": [], ...context });
  app.synth();
  const template = Template.fromStack(stack);
  return { template, resources: template.toJSON().Resources as Resources };
}
const ofType = (resources: Resources, type: string) => Object.values(resources).filter((r) => r.Type === type);
/** The three functions that serve Tollgate (not CDK's own custom resource handlers, nor the cache rotation). */
const tollgateFunctions = (resources: Resources) =>
  ofType(resources, "AWS::Lambda::Function").filter(
    (f) => (f.Properties.Environment as { Variables?: Record<string, unknown> } | undefined)?.Variables?.CONFIG_BUCKET,
  );

describe("dev profile", () => {
  const { template, resources } = synth({ "tollgate:profile": "dev" });

  it("passes cdk-nag with cdk.json's recommended feature flags, and needs its single-AZ acknowledgement", () => {
    expect(cdkJson.context["@aws-cdk/aws-iam:minimizePolicies"]).toBe(true);
    expect(tollgateFunctions(resources)).toHaveLength(3);
    const bare = buildApp({ ...cdkJson.context, "aws:cdk:bundling-stacks": [] }, { acknowledge: false });
    expect(() => bare.app.synth()).toThrow(/AwsSolutions-AEC4/);
  });

  it("has one small node in one AZ, still cluster mode, TLS, AUTH and noeviction", () => {
    template.hasResourceProperties("AWS::ElastiCache::ReplicationGroup", {
      CacheNodeType: "cache.t4g.micro",
      NumNodeGroups: 1,
      ReplicasPerNodeGroup: 0,
      MultiAZEnabled: false,
      TransitEncryptionEnabled: true,
    });
    template.hasResourceProperties("AWS::ElastiCache::ParameterGroup", {
      Properties: { "cluster-enabled": "yes", "maxmemory-policy": "noeviction" },
    });
    expect(ofType(resources, "AWS::EC2::Subnet")).toHaveLength(1);
  });

  it("tears down cleanly: the cache, secret, logs and queues are deleted and the buckets emptied first", () => {
    for (const type of [
      "AWS::ElastiCache::ReplicationGroup",
      "AWS::SecretsManager::Secret",
      "AWS::Logs::LogGroup",
      "AWS::SQS::Queue",
      "AWS::S3::Bucket",
    ])
      for (const resource of ofType(resources, type)) expect(resource.DeletionPolicy, type).toBe("Delete");
    // the config bucket, its access logs, and the decision archive
    expect(ofType(resources, "Custom::S3AutoDeleteObjects")).toHaveLength(3);
  });

  it("reserves no concurrency, traces nothing and has no X-Ray endpoint", () => {
    for (const fn of tollgateFunctions(resources)) {
      expect(fn.Properties.ReservedConcurrentExecutions).toBeUndefined();
      expect(fn.Properties.TracingConfig).toBeUndefined();
    }
    const services = ofType(resources, "AWS::EC2::VPCEndpoint").map((e) => JSON.stringify(e.Properties.ServiceName));
    expect(services.some((name) => name.includes(".xray"))).toBe(false);
    expect(services.some((name) => name.includes(".sqs"))).toBe(true);
  });
});

describe("prod profile", () => {
  const { template, resources } = synth({ "tollgate:profile": "prod" });

  it("keeps today's Multi-AZ replication group, retained after cdk destroy", () => {
    template.hasResourceProperties("AWS::ElastiCache::ReplicationGroup", {
      CacheNodeType: "cache.r7g.large",
      NumNodeGroups: 3,
      ReplicasPerNodeGroup: 1,
      MultiAZEnabled: true,
      AutomaticFailoverEnabled: true,
    });
    for (const type of ["AWS::ElastiCache::ReplicationGroup", "AWS::S3::Bucket", "AWS::SecretsManager::Secret"])
      for (const resource of ofType(resources, type)) expect(resource.DeletionPolicy, type).toBe("Retain");
    expect(ofType(resources, "Custom::S3AutoDeleteObjects")).toHaveLength(0);
    template.hasResourceProperties("AWS::Lambda::Function", {
      ReservedConcurrentExecutions: 100,
      TracingConfig: { Mode: "Active" },
    });
  });
});

describe("the durable option", () => {
  it("synthesizes prod on Valkey 9.0 with the durability asked, passing cdk-nag; without it, none is set", () => {
    for (const durability of ["sync", "async"]) {
      const { template } = synth({
        "tollgate:profile": "prod",
        "tollgate:durability": durability,
        "tollgate:engineVersion": "9.0",
      });
      template.hasResourceProperties("AWS::ElastiCache::ReplicationGroup", {
        Engine: "valkey",
        EngineVersion: "9.0",
        Durability: durability,
        MultiAZEnabled: true,
        TransitEncryptionEnabled: true,
        AtRestEncryptionEnabled: true,
      });
      template.hasResourceProperties("AWS::ElastiCache::ParameterGroup", { CacheParameterGroupFamily: "valkey9" });
    }
    for (const [, group] of Object.entries(synth({ "tollgate:profile": "prod" }).resources).filter(
      ([, r]) => r.Type === "AWS::ElastiCache::ReplicationGroup",
    ))
      expect(group.Properties.Durability).toBeUndefined();
  });
});

describe("settings in the template", () => {
  it("notifies a new SNS topic with the email subscribed from every alarm", () => {
    const { template, resources } = synth({ "tollgate:alarmEmail": "ops@example.com" });
    template.hasResourceProperties("AWS::SNS::Subscription", { Protocol: "email", Endpoint: "ops@example.com" });
    const alarms = ofType(resources, "AWS::CloudWatch::Alarm");
    expect(alarms.length).toBeGreaterThanOrEqual(6);
    for (const alarm of alarms) expect(alarm.Properties.AlarmActions, JSON.stringify(alarm)).toHaveLength(1);
  });

  it("notifies an existing topic, and nobody when neither is set", () => {
    const arn = "arn:aws:sns:us-east-1:123456789012:ops";
    const existing = synth({ "tollgate:alarmTopicArn": arn }).resources;
    expect(ofType(existing, "AWS::SNS::Topic")).toHaveLength(0);
    for (const alarm of ofType(existing, "AWS::CloudWatch::Alarm"))
      expect(alarm.Properties.AlarmActions).toEqual([arn]);
    for (const alarm of ofType(synth({}).resources, "AWS::CloudWatch::Alarm"))
      expect(alarm.Properties.AlarmActions).toBeUndefined();
  });

  it("turns the check API's (and QuotaSync's) per-request metrics off and tracing on by setting", () => {
    const { resources } = synth({ "tollgate:checkApiMetrics": "false", "tollgate:tracing": "true" });
    const functions = tollgateFunctions(resources);
    const disabled = functions.map(
      (f) => (f.Properties.Environment as { Variables: Record<string, string> }).Variables.POWERTOOLS_METRICS_DISABLED,
    );
    // the check API and QuotaSync (its code) publish the per-request metrics; the consumer has none to turn off
    expect(disabled.sort()).toEqual(["true", "true", undefined]);
    for (const fn of functions) expect(fn.Properties.TracingConfig).toEqual({ Mode: "Active" });
  });

  it("builds for arm64 by default and for the architecture asked", () => {
    for (const fn of tollgateFunctions(synth({}).resources)) expect(fn.Properties.Architectures).toEqual(["arm64"]);
    for (const architecture of ["arm64", "x86_64"]) {
      const { resources } = synth({ "tollgate:architecture": architecture });
      for (const fn of tollgateFunctions(resources)) expect(fn.Properties.Architectures).toEqual([architecture]);
    }
  });
});
