// The stack's side of a store loss under caps and limits: an alarm on the metric the functions count, and
// the functions' access to the store epoch's marker in the rules bucket (and nothing more of it).
import { Match, Template } from "aws-cdk-lib/assertions";
import { beforeAll, describe, expect, it } from "vitest";
import { STORE_LOST_METRIC } from "../../functions/core/shared/store-epoch.ts";
import { buildApp } from "../../infra/app.ts";

let template: Template;
beforeAll(() => {
  const { stack } = buildApp({ "aws:cdk:bundling-stacks": [] });
  template = Template.fromStack(stack);
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
