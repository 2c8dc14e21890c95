// The CLI on the queues: `delivery tail` never moves a message toward its DLQ, `campaign push` refuses what
// the policy in service would, `dlq list|show|redrive` with the reasons (real SQS clients on fauxqs).
import { CreateBucketCommand, PutObjectCommand } from "@aws-sdk/client-s3";
import {
  CreateQueueCommand,
  GetQueueAttributesCommand,
  PurgeQueueCommand,
  ReceiveMessageCommand,
  SendMessageCommand,
} from "@aws-sdk/client-sqs";
import { beforeAll, beforeEach, describe, expect, it } from "vitest";
import { SqsDeadLetterSink } from "../../../functions/adapters/sqs-sinks.ts";
import { useAwsEmulator } from "../../support/aws-emulator.ts";
import { cliOutput } from "../../support/cli-output.ts";

const emulator = useAwsEmulator();
let aws: string[];

async function queue(name: string, attributes: Record<string, string> = {}) {
  const { QueueUrl } = await emulator.sqs.send(new CreateQueueCommand({ QueueName: name, Attributes: attributes }));
  const { Attributes } = await emulator.sqs.send(
    new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["QueueArn"] }),
  );
  return { url: QueueUrl as string, arn: Attributes?.QueueArn as string };
}

async function receiveAll(url: string) {
  const { Messages = [] } = await emulator.sqs.send(
    new ReceiveMessageCommand({
      QueueUrl: url,
      MaxNumberOfMessages: 10,
      MessageAttributeNames: ["All"],
      MessageSystemAttributeNames: ["ApproximateReceiveCount"],
    }),
  );
  return Messages;
}

beforeAll(() => {
  aws = ["--endpoint", emulator.endpoint, "--region", "us-east-1"];
});

describe("delivery tail", () => {
  let delivery: { url: string };
  let dlq: { url: string; arn: string };
  beforeAll(async () => {
    dlq = await queue("tail-delivery-dlq");
    delivery = await queue("tail-delivery", {
      RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlq.arn, maxReceiveCount: 2 }),
    });
  });
  beforeEach(async () => {
    await emulator.sqs.send(new PurgeQueueCommand({ QueueUrl: delivery.url }));
    await emulator.sqs.send(new PurgeQueueCommand({ QueueUrl: dlq.url }));
  });

  it("tailed more often than maxReceiveCount leaves every message on the queue, none received, attributes kept", async () => {
    const body = JSON.stringify({
      campaignId: "c",
      channel: "push",
      sends: [{ userId: 1, segment: "s", dedupeId: "c:push:1" }],
    });
    await emulator.sqs.send(
      new SendMessageCommand({
        QueueUrl: delivery.url,
        MessageBody: body,
        MessageAttributes: { campaignId: { DataType: "String", StringValue: "c" } },
      }),
    );
    for (let tail = 0; tail < 5; tail++) {
      const { code, text } = await cliOutput(["delivery", "tail", ...aws, "--queue-url", delivery.url]);
      expect(code).toBe(0);
      expect(text).toContain(body);
      expect(text).toContain("1 delivery messages, 1 sends");
    }
    expect(await receiveAll(dlq.url)).toEqual([]);
    const [message, ...more] = await receiveAll(delivery.url);
    expect(more).toEqual([]);
    expect(message?.Body).toBe(body);
    // the real consumer's receive is the message's first
    expect(message?.Attributes?.ApproximateReceiveCount).toBe("1");
    expect(message?.MessageAttributes?.campaignId?.StringValue).toBe("c");
  });

  it("prints each message once in a tail, even when more than one receive's worth are put back", async () => {
    for (let i = 0; i < 25; i++)
      await emulator.sqs.send(new SendMessageCommand({ QueueUrl: delivery.url, MessageBody: JSON.stringify({ i }) }));
    const { text } = await cliOutput(["delivery", "tail", ...aws, "--queue-url", delivery.url]);
    const seen = text
      .split("\n")
      .filter((line) => line.startsWith("{"))
      .map((line) => (JSON.parse(line) as { i: number }).i);
    expect(seen.sort((a, b) => a - b)).toEqual(Array.from({ length: 25 }, (_, i) => i));
  });

  it("with --remove drains what it read", async () => {
    await emulator.sqs.send(new SendMessageCommand({ QueueUrl: delivery.url, MessageBody: "{}" }));
    expect((await cliOutput(["delivery", "tail", ...aws, "--queue-url", delivery.url, "--remove"])).code).toBe(0);
    expect(await receiveAll(delivery.url)).toEqual([]);
    expect(await receiveAll(dlq.url)).toEqual([]);
  });
});

describe("campaign push against the policy in service", () => {
  let campaign: { url: string };
  const policy = {
    version: "push.1",
    channels: ["push", "email"],
    segments: [],
    default: { name: "rest", caps: { push: [{ window: "7d", max: 3 }] } },
  };
  const push = (...more: string[]) =>
    cliOutput([
      "campaign",
      "push",
      ...aws,
      "--queue-url",
      campaign.url,
      "--bucket",
      "push-checks",
      "--campaign",
      "c1",
      "--range",
      "1-3",
      ...more,
    ]);
  beforeAll(async () => {
    campaign = await queue("push-campaign");
    await emulator.s3.send(new CreateBucketCommand({ Bucket: "push-checks" }));
    await emulator.s3.send(
      new PutObjectCommand({ Bucket: "push-checks", Key: "config/policy.json", Body: JSON.stringify(policy) }),
    );
  });

  it("refuses a channel the policy does not list: exit 1, the channels named, nothing sent", async () => {
    const { code, text } = await push("--channel", "sms");
    expect(code).toBe(1);
    expect(text).toContain('channel: unknown channel "sms" (policy push.1 has push, email)');
    expect(await receiveAll(campaign.url)).toEqual([]);
  });

  it("refuses an `at` more than 5 minutes ahead and one older than the longest window: exit 1, nothing sent", async () => {
    const ahead = await push("--channel", "push", "--at", String(Number.MAX_SAFE_INTEGER));
    expect(ahead.code).toBe(1);
    expect(ahead.text).toContain("at: ");
    expect(ahead.text).toContain("minutes ahead of the clock");
    const old = await push("--channel", "push", "--at", "0");
    expect(old.code).toBe(1);
    expect(old.text).toContain(`ms behind the clock`);
    expect(await receiveAll(campaign.url)).toEqual([]);
  });

  it("refuses when the bucket holds no policy, and without --bucket", async () => {
    const none = await cliOutput([
      "campaign",
      "push",
      ...aws,
      "--queue-url",
      campaign.url,
      "--bucket",
      "push-checks",
      "--policy-key",
      "none.json",
      "--campaign",
      "c1",
      "--channel",
      "push",
      "--range",
      "1-3",
    ]);
    expect(none.code).toBe(1);
    expect(none.text).toContain("none.json");
    const noBucket = await cliOutput([
      "campaign",
      "push",
      ...aws,
      "--queue-url",
      campaign.url,
      "--campaign",
      "c1",
      "--channel",
      "push",
      "--range",
      "1-3",
    ]);
    expect(noBucket.code).toBe(1);
    expect(noBucket.text).toContain("--bucket: required (or --local)");
    expect(await receiveAll(campaign.url)).toEqual([]);
  });

  it("pushes a campaign whose channel and `at` the policy takes", async () => {
    const { code, text } = await push("--channel", "email");
    expect(code).toBe(0);
    expect(text).toContain("pushed campaign c1: 3 users in 1 messages");
    const [message] = await receiveAll(campaign.url);
    expect(JSON.parse(message?.Body ?? "")).toEqual({ campaignId: "c1", channel: "email", userIds: [1, 2, 3] });
  });
});

describe("dlq list, show and redrive", () => {
  let dlq: { url: string };
  let campaign: { url: string };
  const bodies = {
    badChannel: JSON.stringify({ campaignId: "spring", channel: "fax", userIds: [1, 2] }),
    notJson: "{not json",
  };
  beforeEach(async () => {
    dlq = await queue("dlq-commands-dlq");
    campaign = await queue("dlq-commands-campaign");
    await emulator.sqs.send(new PurgeQueueCommand({ QueueUrl: dlq.url }));
    await emulator.sqs.send(new PurgeQueueCommand({ QueueUrl: campaign.url }));
    const sink = new SqsDeadLetterSink(emulator.sqs, dlq.url);
    await sink.send(bodies.badChannel, {
      error: "ValidationError",
      message: 'channel: unknown channel "fax" (policy has push)',
      path: "channel",
      sourceMessageId: "m-1",
    });
    await sink.send(bodies.notJson, {
      error: "ValidationError",
      message: "body: not valid JSON",
      path: "body",
      sourceMessageId: "m-2",
    });
  });
  const ids = async () =>
    (await cliOutput(["dlq", "list", ...aws, "--queue-url", dlq.url, "--json"])).text
      .split("\n")
      .filter((line) => line.startsWith("{"))
      .map((line) => JSON.parse(line) as { messageId: string; sourceMessageId: string; body: string });

  it("lists every dead letter with its error, field, reason and campaign, and moves none", async () => {
    for (let list = 0; list < 2; list++) {
      const { code, text } = await cliOutput(["dlq", "list", ...aws, "--queue-url", dlq.url]);
      expect(code).toBe(0);
      expect(text).toContain('spring fax 2 users  ValidationError [channel]: channel: unknown channel "fax"');
      expect(text).toContain("(not a campaign batch)  ValidationError [body]: body: not valid JSON");
      expect(text).toContain("2 dead letters");
    }
    expect(await receiveAll(campaign.url)).toEqual([]);
  });

  it("shows one dead letter in full, and exits 1 for an ID it does not hold", async () => {
    const letter = (await ids()).find((one) => one.sourceMessageId === "m-1");
    const { code, text } = await cliOutput(["dlq", "show", ...aws, "--queue-url", dlq.url, letter?.messageId ?? ""]);
    expect(code).toBe(0);
    expect(JSON.parse(text)).toMatchObject({
      messageId: letter?.messageId,
      sourceMessageId: "m-1",
      error: "ValidationError",
      path: "channel",
      body: JSON.parse(bodies.badChannel),
    });
    const missing = await cliOutput(["dlq", "show", ...aws, "--queue-url", dlq.url, "no-such-id"]);
    expect(missing.code).toBe(1);
    expect(missing.text).toContain("no dead letter no-such-id");
  });

  it("redrives the chosen dead letter to the campaign queue as it came and keeps the other", async () => {
    const letter = (await ids()).find((one) => one.sourceMessageId === "m-1");
    const { code } = await cliOutput([
      "dlq",
      "redrive",
      ...aws,
      "--queue-url",
      dlq.url,
      "--to",
      campaign.url,
      letter?.messageId ?? "",
    ]);
    expect(code).toBe(0);
    expect((await receiveAll(campaign.url)).map((message) => message.Body)).toEqual([bodies.badChannel]);
    expect((await ids()).map((one) => one.sourceMessageId)).toEqual(["m-2"]);
  });

  it("redrives every dead letter with --all, and refuses both IDs and --all, or neither", async () => {
    expect(
      (await cliOutput(["dlq", "redrive", ...aws, "--queue-url", dlq.url, "--to", campaign.url, "x", "--all"])).code,
    ).toBe(2);
    expect((await cliOutput(["dlq", "redrive", ...aws, "--queue-url", dlq.url, "--to", campaign.url])).code).toBe(2);
    expect(
      (await cliOutput(["dlq", "redrive", ...aws, "--queue-url", dlq.url, "--to", campaign.url, "--all"])).code,
    ).toBe(0);
    const redriven = (await receiveAll(campaign.url)).map((message) => message.Body);
    expect(redriven.sort()).toEqual([bodies.badChannel, bodies.notJson].sort());
    expect(await ids()).toEqual([]);
  });
});
