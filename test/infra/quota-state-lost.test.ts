// The stack's side of a data loss: for Quotas the QuotaSync function runs every minute to restore rules lost
// from Redis, and an alarm fires on the metric the restore counts; for caps and limits an alarm on the
// metric the functions count, and their access to the store epoch's marker (one synth for both).
import { Match, Template } from "aws-cdk-lib/assertions";
import { beforeAll, describe, expect, it } from "vitest";
import { QUOTA_STATE_LOST_METRIC } from "../../functions/core/quotas/quota-sync-service.ts";
import { STORE_LOST_METRIC } from "../../functions/core/shared/store-epoch.ts";
import { buildApp } from "../../infra/app.ts";

let template: Template;
let quotaSyncId: string;
beforeAll(() => {
  const { stack } = buildApp({ "aws:cdk:bundling-stacks": [] });
  template = Template.fromStack(stack);
  quotaSyncId = stack.getLogicalId(stack.functions.quotaSync.node.defaultChild as never);
});

describe("template: Quotas state lost", () => {
  it("invokes the QuotaSync function every minute (the scheduled restore), and lets EventBridge invoke it", () => {
    template.hasResourceProperties("AWS::Events::Rule", {
      ScheduleExpression: "rate(1 minute)",
      State: "ENABLED",
      Targets: Match.arrayWith([Match.objectLike({ Arn: { "Fn::GetAtt": [quotaSyncId, "Arn"] } })]),
    });
    template.hasResourceProperties("AWS::Lambda::Permission", {
      Action: "lambda:InvokeFunction",
      Principal: "events.amazonaws.com",
      FunctionName: { "Fn::GetAtt": [quotaSyncId, "Arn"] },
    });
  });

  it("alarms on the first slot group found without its rule (metric Tollgate/QuotaStateLost, one or more)", () => {
    const alarms = template.findResources("AWS::CloudWatch::Alarm", {
      Properties: { Namespace: "Tollgate", MetricName: QUOTA_STATE_LOST_METRIC },
    });
    const [alarm] = Object.values(alarms);
    expect(Object.keys(alarms)).toHaveLength(1);
    expect(alarm?.Properties).toMatchObject({
      Statistic: "Sum",
      Threshold: 1,
      ComparisonOperator: "GreaterThanOrEqualToThreshold",
      TreatMissingData: "notBreaching",
    });
  });
});

describe("template: store lost", () => {
  it("alarms on the first hash slot found lost (metric Tollgate/StoreLost, one or more)", () => {
    const alarms = template.findResources("AWS::CloudWatch::Alarm", {
      Properties: { Namespace: "Tollgate", MetricName: STORE_LOST_METRIC },
    });
    const [alarm] = Object.values(alarms);
    expect(Object.keys(alarms)).toHaveLength(1);
    expect(alarm?.Properties).toMatchObject({
      Statistic: "Sum",
      Threshold: 1,
      ComparisonOperator: "GreaterThanOrEqualToThreshold",
      TreatMissingData: "notBreaching",
    });
  });

  it("lets the functions read and write the marker under store/ only", () => {
    const policies = template.findResources("AWS::IAM::Policy", {
      Properties: {
        PolicyDocument: {
          Statement: Match.arrayWith([
            Match.objectLike({ Action: "s3:PutObject", Resource: Match.arrayWith([Match.objectLike({})]) }),
          ]),
        },
      },
    });
    const puts = Object.values(policies).flatMap((policy) =>
      (policy.Properties.PolicyDocument.Statement as { Action: string | string[]; Resource: unknown }[])
        .filter((statement) => statement.Action === "s3:PutObject")
        .map((statement) => JSON.stringify(statement.Resource)),
    );
    expect(puts.length).toBeGreaterThan(0);
    for (const resource of puts) expect(resource).toContain("/store/*");
  });
});
