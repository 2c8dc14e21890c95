// A client service's stack adopting Quotas with the stack's helpers, as docs/quotas.md shows it: the IAM
// grant for POST /v1/quotas/sync (outside the VPC), the cache's port and AUTH secret (inside), and the
// dashboard's Quotas row. Synthesized in memory with cdk.json's feature flags; cdk-nag runs on both stacks.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Stack } from "aws-cdk-lib";
import { Template } from "aws-cdk-lib/assertions";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as iam from "aws-cdk-lib/aws-iam";
import { describe, expect, it } from "vitest";
import { buildApp } from "../../infra/app.ts";

const cdkJson = JSON.parse(readFileSync(join(import.meta.dirname, "../../cdk.json"), "utf8")) as {
  context: Record<string, unknown>;
};
type Resource = { Type: string; Properties: Record<string, unknown> };
type TemplateJson = {
  Resources: Record<string, Resource>;
  Outputs?: Record<string, { Value: unknown; Export?: { Name: string } }>;
};
type Statement = { Action: string | string[]; Resource: unknown; Condition?: unknown };

/** Tollgate plus a client stack ("OrdersApi") that uses both helpers; app.synth() runs cdk-nag on both. */
function synthWithClient(context: Record<string, unknown>) {
  // the client acts for tenant "orders", which has a Redis user of its own
  const { app, stack } = buildApp({
    ...cdkJson.context,
    "aws:cdk:bundling-stacks": [],
    "tollgate:cacheTenants": ["orders"],
    ...context,
  });
  const client = new Stack(app, "OrdersApi");
  // outside the VPC: a Lambda role calling the Function URL
  const syncRole = new iam.Role(client, "SyncRole", { assumedBy: new iam.ServicePrincipal("lambda.amazonaws.com") });
  stack.grantQuotaSync(syncRole);
  // inside the VPC: tasks with their own security group calling Redis directly
  const tasks = new ec2.SecurityGroup(client, "Tasks", { vpc: stack.network.vpc, allowAllOutbound: false });
  const taskRole = new iam.Role(client, "TaskRole", { assumedBy: new iam.ServicePrincipal("ecs-tasks.amazonaws.com") });
  stack.grantCacheAccess(tasks, taskRole, "orders");
  app.synth();
  const tollgate = Template.fromStack(stack).toJSON() as TemplateJson;
  const orders = Template.fromStack(client).toJSON() as TemplateJson;
  const logicalId = (construct: { node: { defaultChild?: unknown } }) =>
    client.getLogicalId(construct.node.defaultChild as Parameters<Stack["getLogicalId"]>[0]);
  return {
    tollgate,
    orders,
    ids: { syncRole: logicalId(syncRole), taskRole: logicalId(taskRole), tasks: logicalId(tasks) },
  };
}

/**
 * What a value of the client's template is in Tollgate's: a cross-stack reference (an export import, or a
 * weak reference to a published output, cdk.json's default) is replaced by the output's value.
 */
function imported(value: unknown, tollgate: TemplateJson): unknown {
  const reference = value as { "Fn::ImportValue"?: string; "Fn::GetStackOutput"?: { OutputName: string } };
  const outputs = Object.entries(tollgate.Outputs ?? {});
  if (reference["Fn::ImportValue"] !== undefined) {
    const found = outputs.find(([, o]) => o.Export?.Name === reference["Fn::ImportValue"]);
    if (!found) throw new Error(`no export ${reference["Fn::ImportValue"]}`);
    return found[1].Value;
  }
  if (reference["Fn::GetStackOutput"] !== undefined) {
    const found = outputs.find(([name]) => name === reference["Fn::GetStackOutput"]?.OutputName);
    if (!found) throw new Error(`no output ${reference["Fn::GetStackOutput"].OutputName}`);
    return found[1].Value;
  }
  return value;
}

function statementsOf(template: TemplateJson, roleId: string): Statement[] {
  return Object.values(template.Resources)
    .filter((r) => r.Type === "AWS::IAM::Policy")
    .filter((r) => (r.Properties.Roles as { Ref: string }[]).some((role) => role.Ref === roleId))
    .flatMap((r) => (r.Properties.PolicyDocument as { Statement: Statement[] }).Statement);
}
const actionsOf = (statement: Statement) => ([] as string[]).concat(statement.Action);
const ofType = (template: TemplateJson, type: string) =>
  Object.entries(template.Resources).filter(([, r]) => r.Type === type);

describe("grantQuotaSync: a client outside the VPC", () => {
  for (const [label, context] of [
    ["without provisioned concurrency", { "tollgate:profile": "dev" }],
    [
      "beside the live alias (provisioned concurrency)",
      { "tollgate:profile": "prod", "tollgate:checkApiProvisionedConcurrency": 2 },
    ],
  ] as const) {
    it(`may invoke the QuotaSync function's URL only (${label}), with the AWS_IAM auth-type condition`, () => {
      const { tollgate, orders, ids } = synthWithClient(context);
      const functions = ofType(tollgate, "AWS::Lambda::Function");
      const routesOf = (fn: Resource) =>
        (fn.Properties.Environment as { Variables?: Record<string, unknown> } | undefined)?.Variables?.CHECK_API_ROUTES;
      const [[quotaSyncId, quotaSync] = []] = functions.filter(([, fn]) => routesOf(fn) === "quota-sync");
      expect(quotaSync).toBeDefined();
      const urls = ofType(tollgate, "AWS::Lambda::Url");
      const target = { "Fn::GetAtt": [quotaSyncId, "Arn"] };
      const [[quotaUrlId, quotaUrl] = []] = urls.filter(
        ([, url]) => JSON.stringify(url.Properties.TargetFunctionArn) === JSON.stringify(target),
      );
      expect(quotaUrl?.Properties.AuthType).toBe("AWS_IAM");
      expect(quotaUrl?.Properties.Qualifier).toBeUndefined();
      expect(tollgate.Outputs?.QuotaSyncUrl?.Value).toEqual({ "Fn::GetAtt": [quotaUrlId, "FunctionUrl"] });
      // a function of its own: no alias of the check API, whose reserved concurrency (prod) it does not share
      expect(ofType(tollgate, "AWS::Lambda::Alias").map(([, a]) => a.Properties.Name)).not.toContain("quotas");
      expect(quotaSync?.Properties.ReservedConcurrentExecutions).toBeUndefined();

      const statements = statementsOf(orders, ids.syncRole);
      const invokeUrl = statements.filter((s) => actionsOf(s).includes("lambda:InvokeFunctionUrl"));
      expect(invokeUrl).toHaveLength(1);
      expect(invokeUrl[0]?.Condition).toEqual({ StringEquals: { "lambda:FunctionUrlAuthType": "AWS_IAM" } });
      expect(imported(invokeUrl[0]?.Resource, tollgate)).toEqual(target);
      // Function URLs also require lambda:InvokeFunction, only through the URL
      const invoke = statements.filter((s) => actionsOf(s).includes("lambda:InvokeFunction"));
      expect(invoke.map((s) => s.Condition)).toEqual([{ Bool: { "lambda:InvokedViaFunctionUrl": true } }]);
      expect(imported(invoke[0]?.Resource, tollgate)).toEqual(target);
      // nothing else: no other action, no wildcard resource, and not the check API's own URL's target
      expect(statements.flatMap(actionsOf).sort()).toEqual(["lambda:InvokeFunction", "lambda:InvokeFunctionUrl"]);
      const [[, checkApiUrl] = []] = urls.filter(([id]) => id !== quotaUrlId);
      expect(checkApiUrl).toBeDefined();
      for (const statement of statements) {
        expect(imported(statement.Resource, tollgate)).not.toEqual(checkApiUrl?.Properties.TargetFunctionArn);
      }
    });
  }
});

describe("grantCacheAccess: a client inside the VPC", () => {
  const { tollgate, orders, ids } = synthWithClient({
    "tollgate:profile": "prod",
    "tollgate:cacheTenants": ["orders"],
  });
  const redisGroup = () => {
    const [[, cache] = []] = ofType(tollgate, "AWS::ElastiCache::ReplicationGroup");
    if (!cache) throw new Error("no replication group");
    const [group] = cache.Properties.SecurityGroupIds as unknown[];
    return { group, port: cache.Properties.Port };
  };

  it("opens the cache's security group to the client's on the Redis port only, and the client's egress to it", () => {
    const { group, port } = redisGroup();
    expect(port).toBe(6380);
    const ingress = [
      ...ofType(orders, "AWS::EC2::SecurityGroupIngress"),
      ...ofType(tollgate, "AWS::EC2::SecurityGroupIngress"),
    ]
      .map(([, r]) => r.Properties)
      .filter(
        (p) => JSON.stringify(p.SourceSecurityGroupId) === JSON.stringify({ "Fn::GetAtt": [ids.tasks, "GroupId"] }),
      );
    expect(ingress).toHaveLength(1);
    expect(imported(ingress[0]?.GroupId, tollgate)).toEqual(group);
    expect(ingress[0]).toMatchObject({ IpProtocol: "tcp", FromPort: 6380, ToPort: 6380 });
    const egress = ofType(orders, "AWS::EC2::SecurityGroupEgress").map(([, r]) => r.Properties);
    expect(egress).toHaveLength(1);
    expect(egress[0]).toMatchObject({ IpProtocol: "tcp", FromPort: 6380, ToPort: 6380 });
    expect(imported(egress[0]?.DestinationSecurityGroupId, tollgate)).toEqual(group);
  });

  it("lets the client's role read its tenant's Redis password, and nothing else: never the AUTH token", () => {
    const secrets = ofType(tollgate, "AWS::SecretsManager::Secret");
    const tenantSecret = secrets.find(([id]) => id.includes("Tenantorders"))?.[0];
    expect(tenantSecret).toBeDefined();
    const statements = statementsOf(orders, ids.taskRole);
    expect(statements.flatMap(actionsOf).sort()).toEqual([
      "secretsmanager:DescribeSecret",
      "secretsmanager:GetSecretValue",
    ]);
    for (const statement of statements) expect(imported(statement.Resource, tollgate)).toEqual({ Ref: tenantSecret });
    expect(tollgate.Outputs?.RedisAuthSecretArn?.Value).not.toEqual({ Ref: tenantSecret });
    expect(tollgate.Outputs?.RedisTenantSecretArnorders?.Value).toEqual({ Ref: tenantSecret });
  });

  it("puts the cache behind an RBAC user group: the default user the functions', the tenant's user its quota keys only", () => {
    const [[, cache] = []] = ofType(tollgate, "AWS::ElastiCache::ReplicationGroup");
    expect(cache?.Properties.AuthToken).toBeUndefined();
    expect(cache?.Properties.UserGroupIds).toHaveLength(1);
    const users = ofType(tollgate, "AWS::ElastiCache::User").map(([, user]) => user.Properties);
    expect(users.map((user) => [user.UserName, user.AccessString])).toEqual([
      ["default", "on ~* +@all"],
      ["tollgate-orders", expect.stringMatching(/^on ~tg:t:orders:q:\* -@all \+fcall /)],
    ]);
    const [[, group] = []] = ofType(tollgate, "AWS::ElastiCache::UserGroup");
    expect(group?.Properties.UserIds).toHaveLength(2);
  });

  it("refuses at synth a grant for a tenant without a Redis user", () => {
    expect(() => synthWithClient({ "tollgate:cacheTenants": [] })).toThrow(/tenant "orders" has no Redis user/);
  });
});

describe("the dashboard's Quotas row", () => {
  /** Every widget of the dashboard, CloudFormation references replaced by a placeholder. */
  function widgetsOf(template: TemplateJson) {
    const [[, dashboard] = []] = ofType(template, "AWS::CloudWatch::Dashboard");
    const body = dashboard?.Properties.DashboardBody as { "Fn::Join": [string, unknown[]] } | string;
    const text =
      typeof body === "string" ? body : body["Fn::Join"][1].map((p) => (typeof p === "string" ? p : "REF")).join("");
    return (JSON.parse(text) as { widgets: { properties: { title: string; metrics?: unknown[][] } }[] }).widgets;
  }
  const quotaRow = (template: TemplateJson) =>
    widgetsOf(template)
      .filter((w) => w.properties.title.startsWith("Quotas"))
      .map((w) => ({ title: w.properties.title, metrics: JSON.stringify(w.properties.metrics) }));

  it("graphs the SDK's metrics per client service in the configured namespace, and the sync route's calls", () => {
    for (const namespace of [undefined, "Orders/Quotas"]) {
      const { tollgate } = synthWithClient(namespace ? { "tollgate:quotasMetricsNamespace": namespace } : {});
      const row = quotaRow(tollgate);
      expect(row.map((w) => w.title)).toEqual([
        "Quotas: admitted and denied by service",
        "Quotas: sync latency p99 and allowance age (ms)",
        "Quotas: time degraded (ms) and sync errors",
        "Quotas sync route (POST /v1/quotas/sync, the QuotaSync function)",
      ]);
      const all = row.map((w) => w.metrics).join("\n");
      const search = (metric: string, statistic: string) =>
        `SEARCH('{${namespace ?? "Tollgate"},service} MetricName=\\"${metric}\\"', '${statistic}', 300)`;
      // the names sdk/src/metrics.ts (emfMetrics) publishes
      for (const [metric, statistic] of [
        ["QuotasAdmitted", "Sum"],
        ["QuotasDenied", "Sum"],
        ["QuotasSyncLatency", "p99"],
        ["QuotasAllowanceAge", "Maximum"],
        ["QuotasDegraded", "Maximum"],
        ["QuotasSyncErrors", "Sum"],
      ])
        expect(all).toContain(search(metric as string, statistic as string));
      // the check API's route metrics (check-api-handler.ts), in Tollgate's own namespace
      expect(row[3]?.metrics).toContain('["Tollgate","quotaSyncs","service","check-api"');
      expect(row[3]?.metrics).toContain('["Tollgate","quotaSyncKeys","service","check-api"');
    }
  });

  it("refuses a namespace CloudWatch reserves, naming the key", () => {
    expect(() => buildApp({ "aws:cdk:bundling-stacks": [], "tollgate:quotasMetricsNamespace": "AWS/Lambda" })).toThrow(
      /tollgate:quotasMetricsNamespace: expected a CloudWatch namespace/,
    );
  });
});
