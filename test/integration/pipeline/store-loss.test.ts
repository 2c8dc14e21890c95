// The counter store losing state under caps and limits (FLUSHALL, a primary emptied), through the real
// consumer, check API and cluster: found by the call that would have counted, then what the policy's
// onStoreLoss says (pause: retried, 503 store_lost, nothing counted until acknowledged; continue: counted on).
import type { Message } from "@aws-sdk/client-sqs";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { acknowledgeStoreLoss } from "../../../functions/app/store-actions.ts";
import type { StoreEpochStatus } from "../../../functions/core/shared/store-epoch.ts";
import { runCli } from "../../../scripts/cli.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { capIdentityKey, capTagOf, HASH_SLOTS, hashSlotOf, USERS_PER_GROUP } from "../../../sdk/src/protocol/index.ts";
import { connectCluster, primariesOf, uniqueNamespace } from "../../support/cluster.ts";
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
  version: "store-loss.1",
  channels: ["push"],
  segments: [],
  default: { name: "rest", caps: { push: [{ window: "1d", max: 1 }] } },
};
const users = (count: number, step = 1) => Array.from({ length: count }, (_, i) => i * step);

const post = (stack: LocalStack, path: string, body: unknown) =>
  signedFetch(`${stack.endpoints.functionUrl}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
const health = async (stack: LocalStack) => {
  const response = await signedFetch(`${stack.endpoints.functionUrl}/v1/health`);
  return { status: response.status, body: (await response.json()) as { store: StoreEpochStatus } };
};

/** Every key of `namespace` on the primaries (SCAN each). */
async function keysOf(primaries: readonly Redis[], pattern: string): Promise<string[]> {
  const found: string[] = [];
  for (const node of primaries) {
    let cursor = "0";
    do {
      const [next, keys] = await node.scan(cursor, "MATCH", pattern, "COUNT", 1000);
      cursor = next;
      found.push(...keys);
    } while (cursor !== "0");
  }
  return found;
}

/** A cluster client, connected (on a loaded host the first slots refresh can miss its 1 s deadline). */
async function connected(): Promise<TollgateCluster> {
  for (let attempt = 1; ; attempt++) {
    const client = connectCluster();
    try {
      await client.ping();
      return client;
    } catch (error) {
      client.disconnect();
      if (attempt === 3) throw error;
    }
  }
}

/**
 * The records of one invocation that failed: its batch item failures, or every record when all failed (the
 * batch processor then throws, and Lambda returns the whole batch to the queue).
 */
async function failedRecords(stack: LocalStack, messages: Message[]): Promise<string[]> {
  try {
    return (await invoke(stack, messages)).batchItemFailures.map((f) => f.itemIdentifier);
  } catch (error) {
    if ((error as Error).name !== "FullBatchFailureError") throw error;
    return messages.map((m) => m.MessageId as string);
  }
}

/** A campaign message through the consumer: the records that failed, and the sends forwarded. */
async function campaign(stack: LocalStack, campaignId: string, userIds: number[]) {
  const id = await sendRaw(stack, JSON.stringify({ campaignId, channel: "push", userIds }));
  // visibility 1 s: a failed record is back on the queue for the next receive
  const messages = await receive(stack, 1, undefined, 1);
  const failures = await failedRecords(stack, messages);
  const sent = (await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.dedupeId));
  return { id, failures, sent };
}

describe("onStoreLoss pause (the default)", () => {
  const namespace = uniqueNamespace();
  let stack: LocalStack;
  let cluster: TollgateCluster;
  let primaries: Awaited<ReturnType<typeof primariesOf>>;
  beforeAll(async () => {
    // one check API environment: health reports what the environment that answered found
    stack = await testStack({ checkApiConcurrency: 1, environment: { KEY_NAMESPACE: namespace } });
    await uploadRules(stack, policy, {});
    cluster = connectCluster();
    await cluster.ping();
    primaries = await primariesOf(cluster.nodes("master"));
    expect(primaries.length).toBeGreaterThan(1);
  });
  afterAll(async () => {
    await cluster.quit();
    await stack.stop();
  });
  const acknowledge = () => acknowledgeStoreLoss(clientsOf(stack).s3, stack.endpoints.bucket, cluster, namespace);

  it("FLUSHALL mid-campaign: the next batch is retried with nothing counted, 503 store_lost, then acknowledged and delivered exactly once", async () => {
    const before = await campaign(stack, "spring", users(2_000));
    expect(before.failures).toEqual([]);
    expect(before.sent).toHaveLength(2_000);

    await Promise.all(primaries.map(({ node }) => node.flushall()));
    // detected by the first batch after the loss: retried (a fault that is not the message's), nothing forwarded
    const lost = await campaign(stack, "flash", users(2_000));
    expect(lost.failures).toEqual([lost.id]);
    expect(lost.sent).toEqual([]);
    expect(
      await keysOf(
        primaries.map((p) => p.node),
        `${namespace}:cap:*`,
      ),
    ).toEqual([]);
    // the check API: caps and limits refuse, nothing counted, until acknowledged
    const frequency = await post(stack, "/v1/frequency", { userId: 7, channel: "push" });
    expect(frequency.status).toBe(503);
    expect(((await frequency.json()) as { error: { code: string } }).error.code).toBe("store_lost");
    const limit = await post(stack, "/v1/limit", { key: "k", algorithm: "fixed-window", max: 5, windowMs: 60_000 });
    expect(limit.status).toBe(503);
    const limits = await post(stack, "/v1/limits", {
      scope: "s",
      limits: [{ key: "a", algorithm: "gcra", burst: 2, count: 1, periodMs: 1_000 }],
    });
    expect(limits.status).toBe(503);
    expect(((await limits.json()) as { error: { code: string } }).error.code).toBe("store_lost");
    // no tenant key was written (/v1/limit and /v1/limits keep theirs in the tenant namespace)
    expect(
      await keysOf(
        primaries.map((p) => p.node),
        `${namespace}:t:*`,
      ),
    ).toEqual([]);
    const report = await health(stack);
    expect(report.status).toBe(503);
    expect(report.body.store.onStoreLoss).toBe("pause");
    expect(report.body.store.lostSlots.map((s) => s.slot)).toEqual(
      expect.arrayContaining([hashSlotOf(`${namespace}:rl:{k}:fixed-window`), 0, 256]),
    );
    expect(typeof report.body.store.firstLossAt).toBe("string");
    // the retry before the operator's word fails again, still counting nothing
    const [again] = await receive(stack, 1, undefined, 1);
    expect(await failedRecords(stack, [again!])).toEqual([lost.id]);
    expect(await drainDelivery(stack)).toEqual([]);

    const acknowledged = await acknowledge();
    expect(acknowledged.created).toBe(false);
    expect(acknowledged.slotsWritten).toHaveLength(HASH_SLOTS);
    const [retried] = await receive(stack, 1);
    expect((await invoke(stack, [retried!])).batchItemFailures).toEqual([]);
    const delivered = (await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.dedupeId));
    expect(delivered).toHaveLength(2_000);
    expect(new Set(delivered).size).toBe(2_000);
    expect((await post(stack, "/v1/frequency", { userId: 7, channel: "push" })).status).toBe(200);
    const after = await health(stack);
    expect(after.status).toBe(200);
    expect(after.body.store.lostSlots).toEqual([]);
  });

  it("a primary emptied: only its slots are found lost, and acknowledging writes exactly those", async () => {
    const [emptied] = primaries;
    const ownsSlot = (slot: number) => emptied!.slots.some(([from, to]) => slot >= from && slot <= to);
    await emptied!.node.flushall();
    // one user per cap tag (256 tags): a /v1/frequency check each
    const answers = await Promise.all(
      users(256, USERS_PER_GROUP).map(async (userId) => ({
        slot: hashSlotOf(`${namespace}:cap:{${userId / USERS_PER_GROUP}}:ids`),
        status: (await post(stack, "/v1/frequency", { userId, channel: "push" })).status,
      })),
    );
    for (const { slot, status } of answers) expect(status).toBe(ownsSlot(slot) ? 503 : 200);
    expect(answers.some((a) => a.status === 503) && answers.some((a) => a.status === 200)).toBe(true);
    const report = await health(stack);
    expect(report.body.store.lostSlots.length).toBeGreaterThan(0);
    expect(report.body.store.lostSlots.every(({ slot }) => ownsSlot(slot))).toBe(true);

    // the operator's command: the emptied primary's slots, written again, and nothing else
    const printed: string[] = [];
    const log = vi.spyOn(console, "log").mockImplementation((...args) => void printed.push(args.join(" ")));
    const code = await runCli([
      "store",
      "acknowledge",
      "--endpoint",
      stack.endpoints.awsEndpoint,
      "--region",
      stack.endpoints.region,
      "--bucket",
      stack.endpoints.bucket,
      "--redis",
      ...stack.endpoints.redis.slice(0, 3),
      "--namespace",
      namespace,
    ]);
    log.mockRestore();
    expect(code).toBe(0);
    const ranges = emptied!.slots
      .sort(([a], [b]) => a - b)
      .map(([from, to]) => (from === to ? `${from}` : `${from}-${to}`))
      .join(" ");
    const owned = emptied!.slots.reduce((n, [from, to]) => n + to - from + 1, 0);
    expect(printed.join("\n")).toMatch(new RegExp(`: ${owned} lost hash slots acknowledged \\(${ranges}\\)$`));
    const retried = await Promise.all(
      users(256, USERS_PER_GROUP).map(
        async (userId) => (await post(stack, "/v1/frequency", { userId, channel: "push" })).status,
      ),
    );
    expect(new Set(retried)).toEqual(new Set([200]));
  });
});

describe("a message spanning an emptied primary and live ones (onStoreLoss pause)", () => {
  const namespace = uniqueNamespace();
  let stack: LocalStack;
  let cluster: TollgateCluster;
  beforeAll(async () => {
    stack = await testStack({ maxReceiveCount: 2, environment: { KEY_NAMESPACE: namespace } });
    await uploadRules(stack, policy, {});
    cluster = await connected();
  });
  afterAll(async () => {
    await cluster.quit();
    await stack.stop();
  });

  it("forwards the sends the live slots counted, dead-letters the message StoreLostError, and no user's next send is capped by a send that never went out", async () => {
    // one user per cap tag: the message's calls reach every primary
    const spring = users(256, USERS_PER_GROUP);
    const slotOf = (userId: number) => hashSlotOf(capIdentityKey(namespace, capTagOf(userId)));
    // the store initialised by a first message (every slot's epoch key written)
    expect((await campaign(stack, "warm", [5_000_000])).failures).toEqual([]);
    const [emptied] = await primariesOf(cluster.nodes("master"));
    const ownsSlot = (slot: number) => emptied!.slots.some(([from, to]) => slot >= from && slot <= to);
    await emptied!.node.flushall();
    const lost = spring.filter((userId) => ownsSlot(slotOf(userId)));
    const live = spring.filter((userId) => !ownsSlot(slotOf(userId)));
    expect(lost.length).toBeGreaterThan(0);
    expect(live.length).toBeGreaterThan(0);
    const idOf = (campaignId: string, userId: number) => `${campaignId}:push:${userId}`;

    // regression: the live slots' calls counted their users and the message failed on a lost slot before it
    // forwarded anything; dead-lettered on its last receive, those sends stayed counted and never went out
    // (the calls not yet started when the first one failed count nothing: the sends counted are a part of live)
    const first = await campaign(stack, "spring", spring);
    expect(first.failures).toEqual([first.id]);
    expect(first.sent.length).toBeGreaterThan(0);
    const liveIds = new Set(live.map((userId) => idOf("spring", userId)));
    expect(first.sent.every((id) => liveIds.has(id))).toBe(true);
    // its last receive: dead-lettered with the fault; the loss is known, so nothing is counted or sent again
    const [last] = await receive(stack, 1);
    expect(Number(last?.Attributes?.ApproximateReceiveCount)).toBe(2);
    expect((await invoke(stack, [last!])).batchItemFailures).toEqual([]);
    expect(await drainDelivery(stack)).toEqual([]);
    const dead = await drainRaw(stack, stack.endpoints.deadLetterQueueUrl);
    expect(dead.map((m) => m.MessageAttributes?.error?.StringValue)).toEqual(["StoreLostError"]);
    // nothing forwarded twice, each send under its own dedupe id
    expect(new Set(first.sent).size).toBe(first.sent.length);

    await acknowledgeStoreLoss(clientsOf(stack).s3, stack.endpoints.bucket, cluster, namespace);
    // 1d max 1: exactly the users whose spring send went out are capped; every other user (its spring send
    // never counted, or lost with the emptied primary) is allowed
    const forwarded = new Set(first.sent);
    const summer = await campaign(stack, "summer", spring);
    expect(summer.failures).toEqual([]);
    expect(summer.sent.sort()).toEqual(
      spring
        .filter((userId) => !forwarded.has(idOf("spring", userId)))
        .map((userId) => idOf("summer", userId))
        .sort(),
    );
  });
});

describe("onStoreLoss continue", () => {
  const namespace = uniqueNamespace();
  let stack: LocalStack;
  let cluster: TollgateCluster;
  beforeAll(async () => {
    stack = await testStack({ environment: { KEY_NAMESPACE: namespace } });
    await uploadRules(stack, { ...policy, onStoreLoss: "continue" }, {});
    cluster = connectCluster();
  });
  afterAll(async () => {
    await cluster.quit();
    await stack.stop();
  });

  it("counts on against the empty state after FLUSHALL, the loss noted once per slot", async () => {
    const first = await campaign(stack, "spring", users(300));
    expect(first.sent).toHaveLength(300);
    // capped by 1d max 1 while the store holds the sends
    expect((await campaign(stack, "summer", users(300))).sent).toEqual([]);
    await cluster.ping();
    await Promise.all(cluster.nodes("master").map((node) => node.flushall()));
    // the operator chose this: the users are sent again as if new, within the same batch that found the loss
    const after = await campaign(stack, "flash", users(300));
    expect(after.failures).toEqual([]);
    expect(after.sent).toHaveLength(300);
    const status = stack.consumer.epoch.status();
    expect(status.onStoreLoss).toBe("continue");
    expect(status.slotsLostSinceStart).toBe(1);
    expect(status.lostSlots).toEqual([]);
    // and the state counts again from there
    expect((await campaign(stack, "winter", users(300))).sent).toEqual([]);
    const limit = await post(stack, "/v1/limit", { key: "c", algorithm: "fixed-window", max: 5, windowMs: 60_000 });
    expect(limit.status).toBe(200);
  });
});
