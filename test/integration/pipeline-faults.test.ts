// Faults that are not the message's, through the real consumer and check API (fauxqs + the real cluster):
// Redis answering with an error fails only the record it hit and answers 500, never 503 or fail-open.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import { capIdentityKey, capTagOf } from "../../functions/core/shared/keys.ts";
import type { LocalStack } from "../../scripts/local-stack.ts";
import { connectCluster, uniqueNamespace } from "../support/cluster.ts";
import { drainDelivery, invoke, receive, sendRaw, testStack, uploadRules } from "../support/pipeline.ts";

const policy = {
  version: "faults.1",
  channels: ["push"],
  segments: [{ name: "new", bitmap: "segments/new.roaring", caps: { push: [{ window: "1d", max: 1 }] } }],
  default: { name: "rest", caps: { push: [{ window: "1d", max: 1 }] } },
};

const post = (stack: LocalStack, path: string, body: unknown) =>
  fetch(`${stack.endpoints.functionUrl}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });

describe("Redis answering with an error", () => {
  const namespace = uniqueNamespace();
  let stack: LocalStack;
  let cluster: TollgateCluster;
  beforeAll(async () => {
    stack = await testStack({ environment: { KEY_NAMESPACE: namespace } });
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
