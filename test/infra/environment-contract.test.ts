// The environment contract, held against what a deploy would really set: each Lambda's variables in the
// synthesized template, with CloudFormation references replaced by values of their kind, go through the
// runtime schema the function parses at cold start, and none is a variable the function does not read.
import { Template } from "aws-cdk-lib/assertions";
import { beforeAll, describe, expect, it } from "vitest";
import type { z } from "zod";
import { checkApiEnvironmentSchema, consumerEnvironmentSchema } from "../../functions/app/environment.ts";
import { buildApp } from "../../infra/app.ts";

type Resources = Record<string, { Type: string; Properties: Record<string, unknown> }>;

/** Read by Node and by Powertools themselves, not by Tollgate's code. */
const platformVariable = (name: string) => name === "NODE_OPTIONS" || name.startsWith("POWERTOOLS_");

let resources: Resources;
beforeAll(() => {
  // no bundling: the environment does not depend on it, and synth stays quick
  const { stack } = buildApp({ "aws:cdk:bundling-stacks": [] });
  resources = (Template.fromStack(stack).toJSON() as { Resources: Resources }).Resources;
}, 120_000);

/** A deploy-time value of the kind each reference stands for; an unknown kind fails the test. */
function resolve(value: unknown): string {
  if (typeof value === "string") return value;
  const token = value as Record<string, unknown>;
  if ("Fn::Join" in token) {
    const [separator, parts] = token["Fn::Join"] as [string, unknown[]];
    return parts.map(resolve).join(separator);
  }
  if ("Ref" in token) {
    const id = token.Ref as string;
    const type = resources[id]?.Type;
    if (type === "AWS::SQS::Queue") return `https://sqs.eu-west-1.amazonaws.com/123456789012/${id}`;
    if (type === "AWS::S3::Bucket") return id.toLowerCase();
    if (type === "AWS::KinesisFirehose::DeliveryStream") return `Tollgate-${id}`.slice(0, 64);
    if (type === "AWS::SecretsManager::Secret") return `arn:aws:secretsmanager:eu-west-1:123456789012:secret:${id}`;
    throw new Error(`no value for a Ref to ${id} (${type})`);
  }
  if ("Fn::GetAtt" in token) {
    const [id, attribute] = token["Fn::GetAtt"] as [string, string];
    if (attribute === "ConfigurationEndPoint.Address") return `${id.toLowerCase()}.euw1.cache.amazonaws.com`;
    if (attribute === "ConfigurationEndPoint.Port") return "6379";
    if (attribute === "Arn" && resources[id]?.Type === "AWS::SQS::Queue")
      return `arn:aws:sqs:eu-west-1:123456789012:${id}`;
    if (attribute === "Arn" && resources[id]?.Type === "AWS::IAM::Role") return `arn:aws:iam::123456789012:role/${id}`;
    throw new Error(`no value for ${id}.${attribute}`);
  }
  throw new Error(`no value for ${JSON.stringify(value)}`);
}

function variablesOf(logicalIdPrefix: string): Record<string, string> {
  const functions = Object.entries(resources).filter(
    ([id, resource]) => resource.Type === "AWS::Lambda::Function" && id.startsWith(logicalIdPrefix),
  );
  expect(functions).toHaveLength(1);
  const [, resource] = functions[0] as [string, Resources[string]];
  const { Variables = {} } = (resource.Properties.Environment ?? {}) as { Variables?: Record<string, unknown> };
  return Object.fromEntries(Object.entries(Variables).map(([name, value]) => [name, resolve(value)]));
}

function unread(variables: Record<string, string>, schema: z.ZodObject): string[] {
  return Object.keys(variables).filter((name) => !(name in schema.shape) && !platformVariable(name));
}

describe("the Lambda environment in the template", () => {
  it("parses with the campaign consumer's runtime schema, and sets nothing it does not read", () => {
    const variables = variablesOf("FunctionsCampaignConsumer");
    expect(unread(variables, consumerEnvironmentSchema)).toEqual([]);
    const parsed = consumerEnvironmentSchema.safeParse(variables);
    expect(parsed.error?.issues ?? []).toEqual([]);
    expect(parsed.data).toMatchObject({ REDIS_TLS: true, REDIS_NODES: [{ port: 6379 }] });
  });

  it("parses with the check API's runtime schema, and sets nothing it does not read", () => {
    const variables = variablesOf("FunctionsCheckApi");
    expect(unread(variables, checkApiEnvironmentSchema)).toEqual([]);
    const parsed = checkApiEnvironmentSchema.safeParse(variables);
    expect(parsed.error?.issues ?? []).toEqual([]);
    expect(parsed.data).toMatchObject({ REDIS_TLS: true, REDIS_NODES: [{ port: 6379 }], CHECK_API_ROUTES: "all" });
  });

  it("parses the QuotaSync function's (the check API's code) with the same schema: quota sync alone", () => {
    const variables = variablesOf("FunctionsQuotaSync");
    expect(unread(variables, checkApiEnvironmentSchema)).toEqual([]);
    const parsed = checkApiEnvironmentSchema.safeParse(variables);
    expect(parsed.error?.issues ?? []).toEqual([]);
    expect(parsed.data).toMatchObject({
      REDIS_TLS: true,
      REDIS_NODES: [{ port: 6379 }],
      CHECK_API_ROUTES: "quota-sync",
    });
  });

  it("tells the consumer the queues' own limits: the delivery queue's size and the campaign queue's maxReceiveCount", () => {
    const variables = variablesOf("FunctionsCampaignConsumer");
    const queues = Object.entries(resources).filter(([, resource]) => resource.Type === "AWS::SQS::Queue");
    const queueFor = (url: string) => {
      const found = queues.find(([id]) => url.endsWith(`/${id}`));
      if (!found) throw new Error(`no queue for ${url}`);
      return found[1].Properties;
    };
    const delivery = queueFor(variables.DELIVERY_QUEUE_URL as string);
    expect(String(delivery.MaximumMessageSize)).toBe(variables.DELIVERY_MAX_MESSAGE_BYTES);
    const dlqUrl = variables.DEAD_LETTER_QUEUE_URL as string;
    const campaign = queues.find(([, { Properties }]) => {
      const target = (Properties.RedrivePolicy as { deadLetterTargetArn?: { "Fn::GetAtt"?: [string] } } | undefined)
        ?.deadLetterTargetArn?.["Fn::GetAtt"]?.[0];
      return target !== undefined && dlqUrl.endsWith(`/${target}`);
    });
    if (!campaign) throw new Error(`no queue redrives to ${dlqUrl}`);
    const { maxReceiveCount } = campaign[1].Properties.RedrivePolicy as { maxReceiveCount: number };
    expect(String(maxReceiveCount)).toBe(variables.CAMPAIGN_MAX_RECEIVE_COUNT);
  });
});
