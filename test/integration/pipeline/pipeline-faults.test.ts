// Faults that are not the message's, through the real consumer and check API (fauxqs + the real cluster):
// Redis answering with an error fails only the record it hit and answers 500, never 503 or fail-open; with
// no valid rules, records are retried (never dead-lettered) and the check API answers 503 rules_unavailable;
// a new environment started while the bucket holds a bad policy or bitmap serves the last accepted copies.
import { DeleteObjectCommand } from "@aws-sdk/client-s3";
import { GetQueueAttributesCommand } from "@aws-sdk/client-sqs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { uploadObject } from "../../../functions/app/operator-actions.ts";
import { acceptedPolicyKey } from "../../../functions/core/capping/rules-source.ts";
import { LOCAL_CREDENTIAL } from "../../../scripts/local/local-principals.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { capIdentityKey, capTagOf } from "../../../sdk/src/protocol/index.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import {
  clientsOf,
  drainDelivery,
  drainRaw,
  invoke,
  receive,
  sendRaw,
  testStack,
  uploadRules,
} from "../../support/pipeline.ts";
import { signedFetch } from "../../support/signed-fetch.ts";

const policy = {
  version: "faults.1",
  channels: ["push"],
  segments: [{ name: "new", bitmap: "segments/new.roaring", caps: { push: [{ window: "1d", max: 1 }] } }],
  default: { name: "rest", caps: { push: [{ window: "1d", max: 1 }] } },
};

const post = (stack: LocalStack, path: string, body: unknown) =>
  signedFetch(`${stack.endpoints.functionUrl}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });

describe("Redis answering with an error", () => {
  const namespace = uniqueNamespace();
  let stack: LocalStack;
  let cluster: TollgateCluster;
  beforeAll(async () => {
    // REFRESH_SECONDS 0: the check API tried the (then empty) bucket at start; it must not wait to look again
    stack = await testStack({ environment: { KEY_NAMESPACE: namespace, REFRESH_SECONDS: "0" } });
    await uploadRules(stack, policy, { new: [1, 2, 3] });
    cluster = connectCluster();
    // a set where the script keeps the identity hash of user 5's tag: WRONGTYPE for that tag only
    await cluster.sadd(capIdentityKey(namespace, capTagOf(5)), "not a block");
  });
  afterAll(async () => {
    await cluster.quit();
    await stack.stop();
  });

  it("fails the record it hit, is not dead-lettered, and lets the records after it run", async () => {
    const bad = await sendRaw(stack, JSON.stringify({ campaignId: "hit", channel: "push", userIds: [5] }));
    const good = await sendRaw(stack, JSON.stringify({ campaignId: "fine", channel: "push", userIds: [9_000_000] }));
    const messages = await receive(stack, 2);
    // the failing record first, so a short-circuit would also fail the healthy one
    messages.sort((a, b) => (a.MessageId === bad ? -1 : b.MessageId === bad ? 1 : 0));
    const response = await invoke(stack, messages);
    expect(response.batchItemFailures).toEqual([{ itemIdentifier: bad }]);
    const forwarded = await drainDelivery(stack);
    expect(forwarded.flatMap((m) => m.sends.map((s) => s.dedupeId))).toEqual(["fine:push:9000000"]);
    expect(good).not.toBe(bad);
  });

  it("answers 500 internal_error on /v1/frequency, not 503", async () => {
    const response = await post(stack, "/v1/frequency", { userId: 5, channel: "push" });
    expect(response.status).toBe(500);
    expect(await response.json()).toEqual({ error: { code: "internal_error", message: "internal error" } });
  });
});

describe("a record failing with a Redis error reply on its last receive", () => {
  const namespace = uniqueNamespace();
  let stack: LocalStack;
  let cluster: TollgateCluster;
  beforeAll(async () => {
    stack = await testStack({ maxReceiveCount: 2, environment: { KEY_NAMESPACE: namespace } });
    await uploadRules(stack, policy, { new: [1, 2, 3] });
    cluster = connectCluster();
    await cluster.sadd(capIdentityKey(namespace, capTagOf(5)), "not a block");
  });
  afterAll(async () => {
    await cluster.quit();
    await stack.stop();
  });

  it("is retried before, and dead-lettered by the consumer with Redis' reply as its reason on, the last receive", async () => {
    const body = JSON.stringify({ campaignId: "hit", channel: "push", userIds: [5] });
    const id = await sendRaw(stack, body);
    // with a healthy sibling: a batch whose every record fails is thrown whole by the batch processor
    await sendRaw(stack, JSON.stringify({ campaignId: "fine", channel: "push", userIds: [9_000_000] }));
    const first = await receive(stack, 2, undefined, 1);
    expect(first.map((m) => m.Attributes?.ApproximateReceiveCount)).toEqual(["1", "1"]);
    expect((await invoke(stack, first)).batchItemFailures).toEqual([{ itemIdentifier: id }]);
    expect(await drainRaw(stack, stack.endpoints.deadLetterQueueUrl)).toEqual([]);
    expect((await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.userId))).toEqual([9_000_000]);
    // receive 2 of maxReceiveCount 2: SQS would redrive it next time, as it is; the consumer does it now
    const [last] = await receive(stack, 1);
    expect(last?.Attributes?.ApproximateReceiveCount).toBe("2");
    expect((await invoke(stack, [last!])).batchItemFailures).toEqual([]);
    const dead = await drainRaw(stack, stack.endpoints.deadLetterQueueUrl);
    expect(dead.map((m) => m.Body)).toEqual([body]);
    const attributes = dead[0]?.MessageAttributes ?? {};
    expect(attributes.error?.StringValue).toBe("StoreReplyError");
    expect(attributes.reason?.StringValue).toMatch(/^retries exhausted: .*Redis answered with an error: WRONGTYPE/);
    expect(attributes.sourceMessageId?.StringValue).toBe(id);
    expect(await drainDelivery(stack)).toEqual([]);
  });
});

async function deadLetterCount(stack: LocalStack): Promise<string | undefined> {
  const { Attributes } = await stack.sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: stack.endpoints.deadLetterQueueUrl,
      AttributeNames: ["ApproximateNumberOfMessages"],
    }),
  );
  return Attributes?.ApproximateNumberOfMessages;
}

describe("a cold container with a bad policy", () => {
  let stack: LocalStack;
  beforeAll(async () => {
    // REFRESH_SECONDS 0: every record asks the bucket again, as a retry after the fix would
    stack = await testStack({ environment: { REFRESH_SECONDS: "0" } });
    await uploadObject(clientsOf(stack).s3, stack.endpoints.bucket, "config/policy.json", '{ "version": ');
  });
  afterAll(async () => {
    await stack.stop();
  });

  it("retries valid campaign records (partial batch failure), never dead-letters them, and serves once fixed", async () => {
    const ids = [
      await sendRaw(stack, JSON.stringify({ campaignId: "a", channel: "push", userIds: [1, 2] })),
      await sendRaw(stack, JSON.stringify({ campaignId: "b", channel: "push", userIds: [3] })),
    ];
    // every record fails, so the invocation throws and SQS returns the whole batch to the queue
    const messages = await receive(stack, 2, undefined, 1);
    expect(messages.map((m) => m.MessageId).sort()).toEqual([...ids].sort());
    await expect(invoke(stack, messages)).rejects.toThrow();
    expect(await deadLetterCount(stack)).toBe("0");
    expect(await drainDelivery(stack)).toEqual([]);

    await uploadRules(stack, policy, { new: [1, 2, 3] });
    const retried = await receive(stack, 2);
    expect((await invoke(stack, retried)).batchItemFailures).toEqual([]);
    expect((await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.userId)).sort()).toEqual([1, 2, 3]);
  });

  it("a fresh container serves the last accepted policy while the object fails validation, and health names it", async () => {
    await uploadRules(stack, policy, { new: [1, 2, 3] });
    // one environment brings the policy into service (and keeps its copy), then the bad upload, then a new one
    await withFreshCheckApi(stack, async (url) => {
      expect((await signedFetch(`${url}/v1/health`)).status).toBe(200);
    });
    await uploadObject(clientsOf(stack).s3, stack.endpoints.bucket, "config/policy.json", '{ "version": ');
    await withFreshCheckApi(stack, async (url) => {
      const response = await signedFetch(`${url}/v1/frequency`, {
        method: "POST",
        body: JSON.stringify({ userId: 1, channel: "push", consume: false }),
      });
      expect(response.status).toBe(200);
      expect(await response.json()).toMatchObject({ segment: "new" });
      const health = await signedFetch(`${url}/v1/health`);
      expect(health.status).toBe(200);
      expect(await health.json()).toMatchObject({
        policyVersion: "faults.1",
        refused: [{ key: "config/policy.json", reason: expect.stringContaining("policy"), at: expect.any(Number) }],
      });
    });
  });

  it("answers /v1/frequency with 503 rules_unavailable without a good copy either, and health names the refused object and why", async () => {
    const { s3 } = clientsOf(stack);
    await uploadObject(s3, stack.endpoints.bucket, "config/policy.json", '{ "version": ');
    await s3.send(new DeleteObjectCommand({ Bucket: stack.endpoints.bucket, Key: acceptedPolicyKey }));
    await withFreshCheckApi(stack, async (url) => {
      const response = await signedFetch(`${url}/v1/frequency`, {
        method: "POST",
        body: JSON.stringify({ userId: 1, channel: "push" }),
      });
      expect(response.status).toBe(503);
      expect(await response.json()).toEqual({
        error: { code: "rules_unavailable", message: "no valid capping policy is loaded" },
      });
      const health = await signedFetch(`${url}/v1/health`);
      expect(health.status).toBe(503);
      const report = (await health.json()) as { refused: { key: string; reason: string }[] };
      expect(report.refused).toEqual([
        { key: "config/policy.json", reason: expect.stringContaining("policy"), at: expect.any(Number) },
      ]);
    });
  });
});

describe("a 0-byte bitmap uploaded over a live segment", () => {
  let stack: LocalStack;
  beforeAll(async () => {
    stack = await testStack({ environment: { REFRESH_SECONDS: "0" } });
    await uploadRules(stack, policy, { new: [1, 2, 3] });
  });
  afterAll(async () => {
    await stack.stop();
  });

  it("leaves a new environment (fresh wiring) serving the last good rules, never rules_unavailable, and health says so", async () => {
    // the stack's check API brings the segment into service (and keeps its copy), then the bad upload
    const before = (await (await signedFetch(`${stack.endpoints.functionUrl}/v1/health`)).json()) as {
      segments: unknown;
    };
    expect(before.segments).toEqual({ new: 3 });
    await uploadObject(clientsOf(stack).s3, stack.endpoints.bucket, "segments/new.roaring", new Uint8Array(0));
    await withFreshCheckApi(stack, async (url) => {
      const responses = await Promise.all(
        [1, 2, 3, 4].map((userId) =>
          signedFetch(`${url}/v1/frequency`, { method: "POST", body: JSON.stringify({ userId, channel: "push" }) }),
        ),
      );
      expect(responses.map((r) => r.status)).toEqual([200, 200, 200, 200]);
      const segments = await Promise.all(responses.map(async (r) => ((await r.json()) as { segment: string }).segment));
      expect(segments).toEqual(["new", "new", "new", "rest"]);
      const health = await signedFetch(`${url}/v1/health`);
      expect(health.status).toBe(200);
      expect(await health.json()).toMatchObject({
        ok: true,
        policyVersion: "faults.1",
        segments: { new: 3 },
        refused: [{ key: "segments/new.roaring", reason: expect.stringContaining("empty"), at: expect.any(Number) }],
      });
    });
  });
});

/** A check API wired afresh (a new execution environment: nothing loaded) on its own Function URL server. */
async function withFreshCheckApi(stack: LocalStack, run: (url: string) => Promise<void>): Promise<void> {
  const { wireCheckApi } = await import("../../../functions/app/wiring.ts");
  const { startFunctionUrlServer } = await import("../../../scripts/local/function-url-server.ts");
  const api = wireCheckApi({
    ...process.env,
    REDIS_NODES: stack.endpoints.redis.slice(0, 3).join(","),
    CONFIG_BUCKET: stack.endpoints.bucket,
    AWS_ENDPOINT_URL: stack.endpoints.awsEndpoint,
    REFRESH_SECONDS: "0",
  });
  const server = await startFunctionUrlServer(api.handler, 0, "tollgate-check-api", {
    credentials: [LOCAL_CREDENTIAL],
  });
  try {
    await run(server.url);
  } finally {
    await server.stop();
    api.cluster.disconnect();
  }
}
