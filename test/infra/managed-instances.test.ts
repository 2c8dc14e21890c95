// The check API on Lambda Managed Instances (tollgate:checkApiCompute = managed-instances), synthesized in
// memory with cdk.json's feature flags (bundling skipped): cdk-nag passes, the capacity provider and the
// function's per-environment concurrency are in the template, the checks of one slot are told to share
// calls (CHECK_SLOT_BATCH), and the settings it cannot work with are refused at synth, naming them.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Match, Template } from "aws-cdk-lib/assertions";
import { describe, expect, it } from "vitest";
import { buildApp } from "../../infra/app.ts";
import { checkManagedInstancesRuntime } from "../../infra/config.ts";

const cdkJson = JSON.parse(readFileSync(join(import.meta.dirname, "../../cdk.json"), "utf8")) as {
  context: Record<string, unknown>;
};
type Resources = Record<string, { Type: string; Properties: Record<string, unknown> }>;

function synth(context: Record<string, unknown>): { template: Template; resources: Resources } {
  const { app, stack } = buildApp({ ...cdkJson.context, "aws:cdk:bundling-stacks": [], ...context });
  app.synth();
  const template = Template.fromStack(stack);
  return { template, resources: template.toJSON().Resources as Resources };
}
const ofType = (resources: Resources, type: string) => Object.entries(resources).filter(([, r]) => r.Type === type);
const managed = { "tollgate:checkApiCompute": "managed-instances", "tollgate:checkApiMemoryMb": 2048 };

/** The check API function, by its description (infra/functions.ts). */
function checkApiOf(resources: Resources) {
  const found = ofType(resources, "AWS::Lambda::Function").filter(([, f]) =>
    String(f.Properties.Description).startsWith("Tollgate: frequency checks and rate limits"),
  );
  expect(found).toHaveLength(1);
  return found[0] as [string, Resources[string]];
}

describe.each(["dev", "prod"])("checkApiCompute = managed-instances, %s profile", (profile) => {
  const { template, resources } = synth({
    "tollgate:profile": profile,
    ...managed,
    "tollgate:checkApiEnvironmentConcurrency": 32,
    "tollgate:checkApiMaxVCpus": 24,
  });
  const [checkApiId, checkApi] = checkApiOf(resources);

  it("declares a capacity provider on the VPC's isolated subnets with the functions' security group, the function's architecture and a vCPU ceiling", () => {
    const providers = ofType(resources, "AWS::Lambda::CapacityProvider");
    expect(providers).toHaveLength(1);
    template.hasResourceProperties("AWS::Lambda::CapacityProvider", {
      CapacityProviderScalingConfig: { MaxVCpuCount: 24 },
      InstanceRequirements: { Architectures: ["arm64"] },
      VpcConfig: { SecurityGroupIds: [{ "Fn::GetAtt": [Match.stringLikeRegexp("^NetworkLambdas"), "GroupId"] }] },
    });
    const [, provider] = providers[0] as [string, Resources[string]];
    const subnets = (provider.Properties.VpcConfig as { SubnetIds: { Ref: string }[] }).SubnetIds;
    expect(subnets.length).toBeGreaterThan(0);
    for (const { Ref } of subnets) {
      const subnet = resources[Ref] as Resources[string];
      expect(subnet.Type).toBe("AWS::EC2::Subnet");
      expect(subnet.Properties.MapPublicIpOnLaunch).toBe(false);
    }
  });

  it("runs the check API there with 32 invocations per environment, its checks of one slot sharing a call (CHECK_SLOT_BATCH=32)", () => {
    const [providerId] = ofType(resources, "AWS::Lambda::CapacityProvider")[0] as [string, unknown];
    expect(checkApi.Properties.CapacityProviderConfig).toEqual({
      LambdaManagedInstancesCapacityProviderConfig: {
        CapacityProviderArn: { "Fn::GetAtt": [providerId, "Arn"] },
        PerExecutionEnvironmentMaxConcurrency: 32,
      },
    });
    const variables = (checkApi.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
    expect(variables.CHECK_SLOT_BATCH).toBe("32");
    expect(checkApi.Properties.Runtime).toBe("nodejs24.x");
    expect(checkApi.Properties.MemorySize).toBe(2048);
    // its network is the capacity provider's
    expect(checkApi.Properties.VpcConfig).toBeUndefined();
  });

  it("serves the Function URL from the live alias of a published version, without provisioned concurrency", () => {
    const aliases = ofType(resources, "AWS::Lambda::Alias");
    expect(aliases).toHaveLength(1);
    const [aliasId, alias] = aliases[0] as [string, Resources[string]];
    expect(alias.Properties.FunctionName).toEqual({ Ref: checkApiId });
    expect(alias.Properties.ProvisionedConcurrencyConfig).toBeUndefined();
    template.hasResourceProperties("AWS::Lambda::Url", {
      AuthType: "AWS_IAM",
      Qualifier: "live",
      TargetFunctionArn: { "Fn::GetAtt": [checkApiId, "Arn"] },
    });
    expect(aliasId).toMatch(/CheckApiLive/);
  });

  it("keeps the campaign consumer and QuotaSync on Lambda, in the VPC", () => {
    const others = ofType(resources, "AWS::Lambda::Function").filter(
      ([id, f]) =>
        id !== checkApiId &&
        (f.Properties.Environment as { Variables?: Record<string, unknown> } | undefined)?.Variables?.CONFIG_BUCKET,
    );
    expect(others).toHaveLength(2);
    for (const [, f] of others) {
      expect(f.Properties.CapacityProviderConfig).toBeUndefined();
      expect(f.Properties.VpcConfig).toBeDefined();
      const variables = (f.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
      expect(variables.CHECK_SLOT_BATCH).toBeUndefined();
    }
  });
});

describe("checkApiCompute by default", () => {
  it("is lambda: no capacity provider, no slot batching, the check API in the VPC", () => {
    const { resources } = synth({ "tollgate:profile": "dev" });
    expect(ofType(resources, "AWS::Lambda::CapacityProvider")).toEqual([]);
    const [, checkApi] = checkApiOf(resources);
    expect(checkApi.Properties.CapacityProviderConfig).toBeUndefined();
    expect(checkApi.Properties.VpcConfig).toBeDefined();
    const variables = (checkApi.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
    expect(variables.CHECK_SLOT_BATCH).toBeUndefined();
  });
});

describe("settings managed-instances cannot work with, refused at synth", () => {
  const refusal = (context: Record<string, unknown>) => {
    try {
      synth(context);
      return "synthesized";
    } catch (error) {
      return (error as Error).message;
    }
  };

  it("refuses provisioned concurrency, naming it", () => {
    expect(refusal({ ...managed, "tollgate:checkApiProvisionedConcurrency": 5 })).toMatch(
      /^context tollgate:checkApiProvisionedConcurrency: 5 cannot be combined with tollgate:checkApiCompute = managed-instances/,
    );
  });

  it("refuses less memory than the smallest execution environment, naming it", () => {
    expect(refusal({ "tollgate:checkApiCompute": "managed-instances" })).toMatch(
      /^context tollgate:checkApiMemoryMb: 512 is less than the 2048 MB/,
    );
  });

  it("refuses an unknown compute and a per-environment concurrency out of Lambda's range", () => {
    expect(refusal({ "tollgate:checkApiCompute": "fargate" })).toMatch(
      /^context tollgate:checkApiCompute: expected "lambda" or "managed-instances"/,
    );
    expect(refusal({ ...managed, "tollgate:checkApiEnvironmentConcurrency": 1601 })).toMatch(
      /^context tollgate:checkApiEnvironmentConcurrency: expected an integer from 1 to 1600/,
    );
  });

  it("refuses a function runtime before Node.js 22, naming checkApiCompute", () => {
    expect(() => checkManagedInstancesRuntime("nodejs20.x")).toThrow(
      /^context tollgate:checkApiCompute: managed-instances runs Node.js 22 or later, and the functions declare nodejs20.x/,
    );
    expect(() => checkManagedInstancesRuntime("python3.13")).toThrow(/tollgate:checkApiCompute/);
    expect(() => checkManagedInstancesRuntime("nodejs22.x")).not.toThrow();
  });
});
