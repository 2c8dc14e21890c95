// The stack's deferral path, asserted on the template (synth without bundling): a schedule group, a target
// role only EventBridge Scheduler of this account may assume and that may only send to the campaign queue
// and the schedules' DLQ, a consumer that may create schedules in that group (nothing else) and pass that
// role to the scheduler alone, and the variables that wire them; cdk-nag stays clean.
import { Match, Template } from "aws-cdk-lib/assertions";
import { describe, expect, it } from "vitest";
import { buildApp } from "../../infra/app.ts";

const { app, stack } = buildApp({ "aws:cdk:bundling-stacks": [] });
const template = Template.fromStack(stack);
const ref = (resource: { node: { defaultChild?: unknown } }) =>
  stack.getLogicalId(resource.node.defaultChild as Parameters<typeof stack.getLogicalId>[0]);

type Statement = { Action: string | string[]; Resource: unknown; Condition?: unknown };
function statementsOf(roleLogicalId: string): Statement[] {
  const policies = template.findResources("AWS::IAM::Policy", {
    Properties: { Roles: Match.arrayWith([{ Ref: roleLogicalId }]) },
  });
  return Object.values(policies).flatMap(
    (policy) =>
      (policy as { Properties: { PolicyDocument: { Statement: Statement[] } } }).Properties.PolicyDocument.Statement,
  );
}
const actionsOf = (statements: Statement[]) =>
  statements.flatMap((s) => (Array.isArray(s.Action) ? s.Action : [s.Action]));

describe("deferral schedules in the stack", () => {
  const functions = stack.functions;
  const roleId = ref(functions.deferralRole);

  it("creates the schedule group and a target role for the scheduler of this account only", () => {
    template.resourceCountIs("AWS::Scheduler::ScheduleGroup", 1);
    template.hasResourceProperties("AWS::IAM::Role", {
      AssumeRolePolicyDocument: {
        Statement: [
          Match.objectLike({
            Principal: { Service: "scheduler.amazonaws.com" },
            Condition: { StringEquals: { "aws:SourceAccount": Match.anyValue() } },
          }),
        ],
      },
    });
  });

  it("lets the target role send to the campaign queue and the schedules' DLQ, nothing else", () => {
    const statements = statementsOf(roleId);
    expect(new Set(actionsOf(statements))).toEqual(
      new Set(["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"]),
    );
    const queues = statements.map((s) => JSON.stringify(s.Resource));
    expect(queues.some((q) => q.includes(ref(stack.storage.campaignQueue)))).toBe(true);
    expect(queues.some((q) => q.includes(ref(stack.storage.deferralDeadLetters)))).toBe(true);
  });

  it("lets the consumer create schedules in the group and pass the target role to the scheduler alone", () => {
    const consumerRole = ref(functions.consumer.role as never);
    const statements = statementsOf(consumerRole);
    const create = statements.filter((s) => actionsOf([s]).some((a) => a.startsWith("scheduler:")));
    expect(actionsOf(create)).toEqual(["scheduler:CreateSchedule"]);
    const pass = statements.filter((s) => actionsOf([s]).includes("iam:PassRole"));
    expect(pass).toEqual([
      expect.objectContaining({
        Resource: { "Fn::GetAtt": [roleId, "Arn"] },
        Condition: { StringEquals: { "iam:PassedToService": "scheduler.amazonaws.com" } },
      }),
    ]);
  });

  it("wires the consumer's DEFERRALS variables to them", () => {
    template.hasResourceProperties("AWS::Lambda::Function", {
      Environment: {
        Variables: Match.objectLike({
          DEFERRALS: "aws",
          DEFERRAL_ROLE_ARN: { "Fn::GetAtt": [roleId, "Arn"] },
          DEFERRAL_DLQ_ARN: { "Fn::GetAtt": [ref(stack.storage.deferralDeadLetters), "Arn"] },
          CAMPAIGN_QUEUE_ARN: { "Fn::GetAtt": [ref(stack.storage.campaignQueue), "Arn"] },
        }),
      },
    });
  });

  it("shows held sends by zone on the dashboard and alarms on the deferral DLQ", () => {
    const [dashboard] = Object.values(template.findResources("AWS::CloudWatch::Dashboard"));
    const body = JSON.stringify(dashboard);
    for (const metric of ["quietDropped", "sendsDeferred", "droppedAfterDeferral", "deferredMessages"])
      expect(body).toContain(metric);
    expect(body).toContain("Quiet hours: held sends by zone and channel");
    template.hasResourceProperties("AWS::CloudWatch::Alarm", {
      MetricName: "ApproximateNumberOfMessagesVisible",
      Dimensions: [
        { Name: "QueueName", Value: { "Fn::GetAtt": [ref(stack.storage.deferralDeadLetters), "QueueName"] } },
      ],
    });
  });

  it("passes cdk-nag with them", () => {
    expect(() => app.synth()).not.toThrow();
  });
});
