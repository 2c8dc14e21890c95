// Redis stopped under the pipeline: the batch fails as a whole and is retried, nothing is forwarded
// without a decision, and the retry succeeds once Redis is back (empty: a store loss, acknowledged). The stack has its own cluster, so
// stopping it does not disturb the other tests.
import { afterAll, beforeAll, expect, it } from "vitest";
import { acknowledgeStoreLoss } from "../../../functions/app/store-actions.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { startCluster, stopCluster } from "../../../scripts/redis-cluster.ts";
import { basePort } from "../../support/cluster.ts";
import { drainDelivery, invoke, receive, sendRaw, testStack, uploadRules } from "../../support/pipeline.ts";

// beside the suite's own cluster (7300 by default): two suites on one machine never share it
const OUTAGE_PORT = Number(process.env.REDIS_OUTAGE_BASE_PORT ?? basePort + 300);
const policy = {
  version: "outage.1",
  channels: ["push"],
  segments: [],
  default: { name: "everyone", caps: { push: [{ window: "1d", max: 1 }] } },
};

let stack: LocalStack;
beforeAll(async () => {
  stack = await testStack({
    redisBasePort: OUTAGE_PORT,
    visibilityTimeoutSeconds: 1,
    environment: { REDIS_DEADLINE_MS: "1500" },
  });
  await uploadRules(stack, policy, {});
});
afterAll(async () => {
  await stack.stop();
  await stopCluster({ basePort: OUTAGE_PORT });
});

it("fails the whole batch while Redis is down and succeeds on the retry once it is back", async () => {
  // a warm container: rules loaded, the Redis client connected
  await sendRaw(stack, JSON.stringify({ campaignId: "warm", channel: "push", userIds: [9] }));
  expect((await invoke(stack, await receive(stack, 1))).batchItemFailures).toEqual([]);
  await drainDelivery(stack);

  await stopCluster({ basePort: OUTAGE_PORT });
  const ids = [
    await sendRaw(stack, JSON.stringify({ campaignId: "o1", channel: "push", userIds: [1, 2, 3] })),
    await sendRaw(stack, JSON.stringify({ campaignId: "o2", channel: "push", userIds: [4] })),
  ];
  const messages = await receive(stack, 2);
  // every record fails, so the invocation throws and SQS returns the whole batch to the queue
  await expect(invoke(stack, messages)).rejects.toThrow();
  expect(await drainDelivery(stack)).toEqual([]);

  // Redis comes back (empty: a fresh cluster on the same ports); the same client reconnects
  await startCluster({ basePort: OUTAGE_PORT });
  const retried = await receive(stack, 2);
  expect(new Set(retried.map((m) => m.MessageId))).toEqual(new Set(ids));
  expect(retried.every((m) => m.Attributes?.ApproximateReceiveCount === "2")).toBe(true);
  // back empty, the store lost its state: under onStoreLoss pause nothing is counted until acknowledged
  await expect(invoke(stack, retried)).rejects.toThrow();
  expect(await drainDelivery(stack)).toEqual([]);
  expect(stack.consumer.epoch.status().lostSlots.length).toBeGreaterThan(0);
  const { consumer } = stack;
  await acknowledgeStoreLoss(consumer.s3, stack.endpoints.bucket, consumer.cluster, consumer.config.KEY_NAMESPACE);
  const acknowledged = await receive(stack, 2);
  expect(acknowledged.every((m) => m.Attributes?.ApproximateReceiveCount === "3")).toBe(true);
  expect((await invoke(stack, acknowledged)).batchItemFailures).toEqual([]);
  expect((await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.userId)).sort()).toEqual([1, 2, 3, 4]);
});
