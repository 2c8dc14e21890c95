// The cache passwords' rotation in the template: a RotationSchedule on every secret the cache takes a password
// from (the AUTH token; with tollgate:cacheTenants the default user's and each tenant user's), one function in
// the VPC as their rotation Lambda, allowed to change that replication group or those users and nothing else.
// Synthesized in memory with cdk.json's flags; app.synth() runs cdk-nag, which fails on any finding left.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { buildApp } from "../../infra/app.ts";

const cdkJson = JSON.parse(readFileSync(join(import.meta.dirname, "../../cdk.json"), "utf8")) as {
  context: Record<string, unknown>;
};
type Resource = { Type: string; Properties: Record<string, unknown> };
type Statement = { Action: string | string[]; Resource: unknown };

function synth(context: Record<string, unknown> = {}) {
  const { app, stack } = buildApp({ ...cdkJson.context, "aws:cdk:bundling-stacks": [], ...context });
  const assembly = app.synth();
  const template = assembly.getStackArtifact(stack.artifactId).template as { Resources: Record<string, Resource> };
  const ofType = (type: string) => Object.entries(template.Resources).filter(([, r]) => r.Type === type);
  const rotation = stack.getLogicalId(stack.cacheRotation.function.node.defaultChild as never);
  const fn = template.Resources[rotation] as Resource;
  const policies = ofType("AWS::IAM::Policy").filter(([, p]) =>
    JSON.stringify(p.Properties.Roles).includes(
      stack.getLogicalId(stack.cacheRotation.function.role?.node.defaultChild as never),
    ),
  );
  const statements = policies.flatMap(([, p]) => (p.Properties.PolicyDocument as { Statement: Statement[] }).Statement);
  const actions = statements.flatMap((s) => (Array.isArray(s.Action) ? s.Action : [s.Action]));
  return { stack, template, ofType, rotation, fn, statements, actions };
}

const ref = (id: string) => ({ Ref: id });

describe("the cache passwords' rotation", () => {
  it("rotates the AUTH token every 30 days with ROTATE then SET on the one replication group", () => {
    const { stack, ofType, rotation, fn, statements, actions } = synth();
    const schedules = ofType("AWS::SecretsManager::RotationSchedule");
    expect(schedules).toHaveLength(1);
    const [, schedule] = schedules[0] as [string, Resource];
    expect(schedule.Properties).toMatchObject({
      SecretId: ref(stack.getLogicalId(stack.cache.authToken.node.defaultChild as never)),
      RotationLambdaARN: { "Fn::GetAtt": [rotation, "Arn"] },
      RotationRules: { ScheduleExpression: "rate(30 days)" },
    });
    // in the VPC, in the isolated subnets, with the functions' group (the one the cache admits)
    expect(fn.Properties.VpcConfig).toBeDefined();
    expect(JSON.stringify(fn.Properties.Environment)).toContain('\\"kind\\":\\"auth-token\\"');
    const elasticache = statements.filter((s) => JSON.stringify(s.Action).includes("elasticache:"));
    expect(elasticache).toHaveLength(1);
    expect([elasticache[0]?.Action].flat().sort()).toEqual([
      "elasticache:DescribeReplicationGroups",
      "elasticache:ModifyReplicationGroup",
    ]);
    expect(JSON.stringify(elasticache[0]?.Resource)).toContain(":replicationgroup:");
    expect(JSON.stringify(elasticache[0]?.Resource)).toContain(stack.getLogicalId(stack.cache.replicationGroup));
    expect(actions).not.toContain("elasticache:ModifyUser");
    // nothing wider than the rotation needs: no wildcard service actions
    expect(actions.filter((a) => a.endsWith(":*") || a === "*")).toEqual([]);
    // the ElastiCache API is reached through an endpoint (no NAT in the VPC)
    expect(
      ofType("AWS::EC2::VPCEndpoint").some(([, e]) => JSON.stringify(e.Properties.ServiceName).includes("elasticache")),
    ).toBe(true);
  });

  it("with RBAC users, rotates the default user's and each tenant's password with ModifyUser on those users only", () => {
    const { ofType, fn, statements, actions } = synth({ "tollgate:cacheTenants": ["orders", "checkout"] });
    const schedules = ofType("AWS::SecretsManager::RotationSchedule");
    expect(schedules).toHaveLength(3);
    const environment = JSON.stringify(fn.Properties.Environment);
    for (const user of ["default", "tollgate-orders", "tollgate-checkout"])
      expect(environment).toContain(`\\"userName\\":\\"${user}\\"`);
    expect(environment).not.toContain("auth-token");
    const users = statements.find((s) => JSON.stringify(s.Action).includes("elasticache:ModifyUser"));
    expect(JSON.stringify(users?.Resource).match(/:user:/g)).toHaveLength(3);
    expect(actions).not.toContain("elasticache:ModifyReplicationGroup");
  });
});
