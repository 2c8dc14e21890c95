// A client service from any stack: the SSM parameters, exported outputs and managed policies the Tollgate
// stack publishes (infra/client-exports.ts), the network a container client needs, quota sync granted to
// another account, and the example client app in examples/client-stack/, synthesized on its own.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { App } from "aws-cdk-lib";
import { Template } from "aws-cdk-lib/assertions";
import { describe, expect, it } from "vitest";
import { OrdersStack } from "../../examples/client-stack/orders-stack.ts";
import { buildApp } from "../../infra/app.ts";
import { CLIENT_PARAMETERS } from "../../infra/client-exports.ts";

const cdkJson = JSON.parse(readFileSync(join(import.meta.dirname, "../../cdk.json"), "utf8")) as {
  context: Record<string, unknown>;
};
type Resource = { Type: string; Properties: Record<string, unknown> };
type TemplateJson = {
  Resources: Record<string, Resource>;
  Parameters?: Record<string, { Type: string; Default?: string }>;
  Outputs?: Record<string, { Value: unknown; Export?: { Name: unknown } }>;
};

function synth(context: Record<string, unknown> = {}): TemplateJson {
  const { app, stack } = buildApp({ ...cdkJson.context, "aws:cdk:bundling-stacks": [], ...context });
  app.synth();
  return Template.fromStack(stack).toJSON() as TemplateJson;
}
const ofType = (template: TemplateJson, type: string) =>
  Object.entries(template.Resources).filter(([, r]) => r.Type === type);
const parametersOf = (template: TemplateJson) =>
  new Map(ofType(template, "AWS::SSM::Parameter").map(([, r]) => [r.Properties.Name as string, r.Properties.Value]));
/** The subnets of `client-subnet-ids`: Fn::Join of their refs, or one ref where there is one subnet. */
const subnetRefs = (value: unknown): unknown[] =>
  (value as { "Fn::Join"?: [string, unknown[]] })["Fn::Join"]?.[1] ?? [value];
const only = <T>(items: T[]): T => {
  expect(items).toHaveLength(1);
  return items[0] as T;
};

describe("values for a client in another app", () => {
  const template = synth();
  const parameters = parametersOf(template);
  const value = (name: string) => parameters.get(`/tollgate/clients/${name}`);
  const [cacheId, cache] = only(ofType(template, "AWS::ElastiCache::ReplicationGroup"));
  const [secretId] = only(ofType(template, "AWS::SecretsManager::Secret"));

  it("publishes every value under /<name>/clients/ in SSM, equal to what the stack's own grants use", () => {
    expect([...parameters.keys()].sort()).toEqual(
      Object.values(CLIENT_PARAMETERS)
        .map((name) => `/tollgate/clients/${name}`)
        .sort(),
    );
    expect(value("quota-sync-url")).toEqual(template.Outputs?.QuotaSyncUrl?.Value);
    expect(value("redis-configuration-endpoint")).toEqual(template.Outputs?.RedisConfigurationEndpoint?.Value);
    expect(value("redis-auth-secret-arn")).toEqual({ Ref: secretId });
    expect(value("redis-port")).toBe(String(cache.Properties.Port));
    expect(value("cache-security-group-id")).toEqual((cache.Properties.SecurityGroupIds as unknown[])[0]);
    // by default a client in the VPC runs in the isolated subnets, the cache's own
    const [, subnetGroup] = only(ofType(template, "AWS::ElastiCache::SubnetGroup"));
    expect(subnetRefs(value("client-subnet-ids"))).toEqual(subnetGroup.Properties.SubnetIds);
    expect(cacheId).toBeDefined();
  });

  it("exports each value as a stack output too, named after the stack", () => {
    const exported = Object.values(template.Outputs ?? {}).filter((o) => o.Export);
    expect(exported.map((o) => o.Export?.Name).sort()).toEqual(
      Object.keys(CLIENT_PARAMETERS)
        .map((key) => `Tollgate-${key.charAt(0).toUpperCase()}${key.slice(1)}`)
        .sort(),
    );
    expect(new Set(exported.map((o) => JSON.stringify(o.Value)))).toEqual(
      new Set([...parameters.values()].map((v) => JSON.stringify(v))),
    );
  });

  it("offers quota sync as a managed policy: the QuotaSync function's URL only, with the AWS_IAM conditions", () => {
    const policies = ofType(template, "AWS::IAM::ManagedPolicy");
    const arnParameter = value("quota-sync-policy-arn") as { Ref: string };
    const policy = template.Resources[arnParameter.Ref];
    expect(policy?.Type).toBe("AWS::IAM::ManagedPolicy");
    const [quotaSyncId] = only(
      ofType(template, "AWS::Lambda::Function").filter(
        ([, fn]) =>
          (fn.Properties.Environment as { Variables?: Record<string, unknown> } | undefined)?.Variables
            ?.CHECK_API_ROUTES === "quota-sync",
      ),
    );
    const statements = ((policy as Resource).Properties.PolicyDocument as { Statement: Record<string, unknown>[] })
      .Statement;
    expect(statements).toEqual([
      {
        Action: "lambda:InvokeFunctionUrl",
        Effect: "Allow",
        Resource: { "Fn::GetAtt": [quotaSyncId, "Arn"] },
        Condition: { StringEquals: { "lambda:FunctionUrlAuthType": "AWS_IAM" } },
      },
      {
        Action: "lambda:InvokeFunction",
        Effect: "Allow",
        Resource: { "Fn::GetAtt": [quotaSyncId, "Arn"] },
        Condition: { Bool: { "lambda:InvokedViaFunctionUrl": "true" } },
      },
    ]);
    expect(policies).toHaveLength(2);
  });

  it("offers the cache's IAM half as a managed policy: reading the AUTH token's secret, nothing else", () => {
    const arnParameter = value("cache-client-policy-arn") as { Ref: string };
    const policy = template.Resources[arnParameter.Ref];
    const statements = ((policy as Resource).Properties.PolicyDocument as { Statement: Record<string, unknown>[] })
      .Statement;
    expect(statements).toEqual([
      {
        Action: ["secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue"],
        Effect: "Allow",
        Resource: { Ref: secretId },
      },
    ]);
  });
});

describe("quota sync for another account", () => {
  it("admits each listed account on the QuotaSync function (both Function URL actions), none by default", () => {
    const permissions = (template: TemplateJson) =>
      ofType(template, "AWS::Lambda::Permission").filter(([, p]) => /^[0-9]{12}$/.test(String(p.Properties.Principal)));
    expect(permissions(synth())).toHaveLength(0);
    const granted = permissions(synth({ "tollgate:quotaSyncAccounts": "111122223333,444455556666" })).map(
      ([, p]) => p.Properties,
    );
    expect(granted).toHaveLength(4);
    for (const account of ["111122223333", "444455556666"]) {
      const mine = granted.filter((p) => p.Principal === account);
      expect(mine.map((p) => p.Action).sort()).toEqual(["lambda:InvokeFunction", "lambda:InvokeFunctionUrl"]);
      expect(mine.find((p) => p.Action === "lambda:InvokeFunctionUrl")?.FunctionUrlAuthType).toBe("AWS_IAM");
      expect(mine.find((p) => p.Action === "lambda:InvokeFunction")?.InvokedViaFunctionUrl).toBe(true);
    }
  });

  it("refuses what is not a list of account IDs, naming the key", () => {
    expect(() => synth({ "tollgate:quotaSyncAccounts": "1234,arn:aws:iam::1:root" })).toThrow(
      /^context tollgate:quotaSyncAccounts: expected comma-separated 12-digit AWS account IDs/,
    );
  });
});

describe("the network a container client needs", () => {
  const services = (template: TemplateJson) =>
    ofType(template, "AWS::EC2::VPCEndpoint").map(([, e]) => JSON.stringify(e.Properties.ServiceName));
  const isolatedCidrs = (template: TemplateJson) =>
    ofType(template, "AWS::EC2::Subnet")
      .filter(([id]) => id.includes("private"))
      .map(([, s]) => s.Properties.CidrBlock);

  it("adds the ECR API, ECR Docker and CloudWatch Logs endpoints with clientNetwork=endpoints only", () => {
    const wanted = [".ecr.api", ".ecr.dkr", ".logs"];
    const plain = services(synth());
    for (const name of wanted) expect(plain.some((s) => s.includes(name))).toBe(false);
    const endpoints = services(synth({ "tollgate:clientNetwork": "endpoints" }));
    for (const name of wanted)
      expect(
        endpoints.filter((s) => s.includes(name)),
        name,
      ).toHaveLength(1);
  });

  it("adds client subnets behind one NAT gateway with clientNetwork=nat, the cache's subnets unchanged", () => {
    const prod = { "tollgate:profile": "prod" };
    const before = synth(prod);
    const nat = synth({ ...prod, "tollgate:clientNetwork": "nat" });
    expect(ofType(before, "AWS::EC2::NatGateway")).toHaveLength(0);
    expect(ofType(nat, "AWS::EC2::NatGateway")).toHaveLength(1);
    expect(isolatedCidrs(nat)).toEqual(isolatedCidrs(before));
    const [, subnetGroup] = only(ofType(nat, "AWS::ElastiCache::SubnetGroup"));
    const ids = subnetRefs(parametersOf(nat).get("/tollgate/clients/client-subnet-ids")).map(
      (ref) => (ref as { Ref: string }).Ref,
    );
    expect(ids).toHaveLength(2);
    for (const id of ids) {
      expect(id).toMatch(/clients/);
      expect(subnetGroup.Properties.SubnetIds).not.toContainEqual({ Ref: id });
      // routed through the NAT: the route table of each client subnet has a default route to it
      const routes = ofType(nat, "AWS::EC2::Route").filter(
        ([routeId, r]) => routeId.startsWith(id.replace(/Subnet[0-9A-F]+$/, "")) && r.Properties.NatGatewayId,
      );
      expect(routes, id).toHaveLength(1);
    }
  });
});

describe("the example client app (examples/client-stack/)", () => {
  const app = new App({ context: { "aws:cdk:bundling-stacks": [] } });
  const orders = new OrdersStack(app, "OrdersApi");
  app.synth();
  const template = Template.fromStack(orders).toJSON() as TemplateJson;
  /** The SSM parameter a CloudFormation parameter of the example's template resolves, by its logical ID. */
  const ssmName = (reference: unknown) =>
    template.Parameters?.[(reference as { Ref: string }).Ref]?.Default ?? JSON.stringify(reference);

  it("reads only parameters the Tollgate stack publishes, resolved at deploy time", () => {
    const published = [...parametersOf(synth()).keys()];
    const read = Object.values(template.Parameters ?? {})
      .filter((p) => p.Type === "AWS::SSM::Parameter::Value<String>")
      .map((p) => p.Default)
      // CDK's own check of the bootstrap version, in every stack
      .filter((name) => !name?.startsWith("/cdk-bootstrap/"));
    expect(read.length).toBeGreaterThanOrEqual(8);
    for (const name of read) expect(published).toContain(name);
  });

  it("syncs Quotas from a Lambda outside the VPC with the managed quota sync policy and the URL", () => {
    const [, fn] = only(ofType(template, "AWS::Lambda::Function"));
    expect(fn.Properties.VpcConfig).toBeUndefined();
    const variables = (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
    expect(ssmName(variables.QUOTA_SYNC_URL)).toBe("/tollgate/clients/quota-sync-url");
    const role = template.Resources[(fn.Properties.Role as { "Fn::GetAtt": [string] })["Fn::GetAtt"][0]];
    const attached = ((role as Resource).Properties.ManagedPolicyArns as unknown[]).map(ssmName);
    expect(attached).toContain("/tollgate/clients/quota-sync-policy-arn");
  });

  it("runs a worker in Tollgate's VPC with the cache's port opened from its group, the secret's ARN and read policy", () => {
    const [, service] = only(ofType(template, "AWS::ECS::Service"));
    const network = (service.Properties.NetworkConfiguration as { AwsvpcConfiguration: Record<string, unknown> })
      .AwsvpcConfiguration;
    expect(network.AssignPublicIp).toBe("DISABLED");
    const [, ingress] = only(ofType(template, "AWS::EC2::SecurityGroupIngress"));
    expect(ssmName(ingress.Properties.GroupId)).toBe("/tollgate/clients/cache-security-group-id");
    expect(ssmName(ingress.Properties.FromPort)).toBe("/tollgate/clients/redis-port");
    expect(ssmName(ingress.Properties.ToPort)).toBe("/tollgate/clients/redis-port");
    expect((network.SecurityGroups as unknown[])[0]).toEqual(ingress.Properties.SourceSecurityGroupId);
    const [, task] = only(ofType(template, "AWS::ECS::TaskDefinition"));
    const [container] = task.Properties.ContainerDefinitions as {
      Environment: { Name: string; Value: unknown }[];
      Secrets?: unknown;
    }[];
    const environment = Object.fromEntries(container?.Environment.map((e) => [e.Name, ssmName(e.Value)]) ?? []);
    // the ARN, never the token: a rotated token is read again by the process (ECS would freeze the value)
    expect(environment).toMatchObject({
      REDIS_NODES: "/tollgate/clients/redis-configuration-endpoint",
      REDIS_AUTH_SECRET_ARN: "/tollgate/clients/redis-auth-secret-arn",
      REDIS_TLS: '"true"',
    });
    expect(container?.Secrets).toBeUndefined();
    const taskRole = template.Resources[(task.Properties.TaskRoleArn as { "Fn::GetAtt": [string] })["Fn::GetAtt"][0]];
    expect(((taskRole as Resource).Properties.ManagedPolicyArns as unknown[]).map(ssmName)).toEqual([
      "/tollgate/clients/cache-client-policy-arn",
    ]);
  });
});
