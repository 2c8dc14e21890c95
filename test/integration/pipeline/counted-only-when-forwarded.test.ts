// Nothing is counted that is not forwarded: messages that cannot be delivered, refused segment shrinks, and
// payloads SQS refuses raw.
import { CreateBucketCommand } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { S3ObjectStore } from "../../../functions/adapters/s3-object-store.ts";
import { publishSegments, uploadObject } from "../../../functions/app/operator-actions.ts";
import { allowShrinkMarkerKey, RulesSource } from "../../../functions/core/capping/rules-source.ts";
import { buildSegments } from "../../../functions/core/capping/segment-builder.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
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
import { T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

const pipelinePolicy = {
  version: "review2.1",
  channels: ["push"],
  segments: [{ name: "new", bitmap: "segments/new.roaring", caps: { push: [{ window: "1d", max: 1 }] } }],
  default: { name: "rest", caps: { push: [{ window: "1d", max: 1 }] } },
};
/** SQS's largest message, and the default MaximumMessageSize of every queue of the stack. */
const SQS_MAX = 1_048_576;

/** The shrink guards' clock, bucket and containers: segment "new" of 10,000 users in a fresh bucket. */
const shrinkClock = fixedClock(T0);
const usersBitmap = (n: number) =>
  buildSegments([{ name: "s", userIds: Array.from({ length: n }, (_, i) => i) }]).get("s") as Uint8Array;
const shrinkPolicy = (bitmap: string) =>
  JSON.stringify({
    ...pipelinePolicy,
    version: uniqueNamespace(),
    segments: [{ ...pipelinePolicy.segments[0], bitmap }],
  });

describe("review: nothing counted that is not forwarded (issue 9 item 7)", () => {
  let stack: LocalStack;
  beforeAll(async () => {
    // maxReceiveCount 1: the first receive is the last, so a fault is dead-lettered by the consumer at once
    stack = await testStack({ maxReceiveCount: 1 });
    await uploadRules(stack, pipelinePolicy, { new: [1, 2, 3] });
  });
  afterAll(async () => {
    await stack.stop();
  });
  const shrinkBucket = async () => {
    const bucket = `r4-shrink-${uniqueNamespace()}`.toLowerCase().replace(/[^a-z0-9-]/g, "-");
    const { s3 } = clientsOf(stack);
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    await uploadObject(s3, bucket, "segments/new.roaring", usersBitmap(10_000));
    await uploadObject(s3, bucket, "config/policy.json", shrinkPolicy("segments/new.roaring"));
    const container = () =>
      new RulesSource({ store: new S3ObjectStore(s3, bucket), refreshMs: 60_000, clock: shrinkClock });
    return { s3, bucket, container };
  };

  it("a container started after a refused 99% shrink serves the last accepted bitmap, not the refused one (review3 defect, fixed)", async () => {
    const bucket = `r3-shrink-${uniqueNamespace()}`;
    const { s3 } = clientsOf(stack);
    const bitmapOf = (n: number) =>
      buildSegments([{ name: "new", userIds: Array.from({ length: n }, (_, i) => i) }]).get("new") as Uint8Array;
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    await uploadObject(s3, bucket, "segments/new.roaring", bitmapOf(10_000));
    await uploadObject(s3, bucket, "config/policy.json", JSON.stringify(pipelinePolicy));
    const clock = fixedClock(T0);
    const container = () => new RulesSource({ store: new S3ObjectStore(s3, bucket), refreshMs: 60_000, clock });
    const warm = container();
    expect((await warm.current()).segments.sizes()).toEqual([10_000]);
    // a bad export, not forced: the warm container keeps the last good bitmap, and so does a new one
    await publishSegments(s3, bucket, [{ name: "new.roaring", bytes: bitmapOf(100) }]);
    clock.advance(60_000);
    expect((await warm.current()).segments.sizes()).toEqual([10_000]);
    const cold = await container()
      .current()
      .then(
        (rules) => rules.segments.sizes(),
        (error: Error) => error.name,
      );
    expect(cold).not.toEqual([100]);
  });

  it("segments upload --allow-shrink: a container that refreshed between the bitmap and its force marker serves the forced upload once the marker is there, as a new container does (review4 defect, fixed)", async () => {
    const { s3, bucket, container } = await shrinkBucket();
    const warm = container();
    expect((await warm.current()).segments.sizes()).toEqual([10_000]);
    // publishSegments(..., { allowShrink: true }) puts the bitmap, then its marker: a refresh may fall between
    const store = new S3ObjectStore(s3, bucket);
    await store.put("segments/new.roaring", usersBitmap(100));
    shrinkClock.advance(60_000);
    expect((await warm.current()).segments.sizes()).toEqual([10_000]);
    // the marker as publishSegments writes it: the upload's ETag and write time
    const { etag, modifiedAt } = await store.head("segments/new.roaring");
    await store.put(allowShrinkMarkerKey("segments/new.roaring"), JSON.stringify({ etag, modifiedAt }));
    expect((await container().current()).segments.sizes()).toEqual([100]);
    shrinkClock.advance(60_000);
    expect((await warm.current()).segments.sizes()).toEqual([100]);
  });

  it("a segment whose policy moves it to a new bitmap key holding 1% of its users is refused like a shrink, and the last good rules stay (review4 defect, fixed)", async () => {
    const { s3, bucket, container } = await shrinkBucket();
    const warm = container();
    expect((await warm.current()).segments.sizes()).toEqual([10_000]);
    // the export job writes its new file name and the policy follows it (no --allow-shrink)
    await publishSegments(s3, bucket, [{ name: "new-2026-11-23.roaring", bytes: usersBitmap(100) }]);
    await uploadObject(s3, bucket, "config/policy.json", shrinkPolicy("segments/new-2026-11-23.roaring"));
    shrinkClock.advance(60_000);
    expect((await warm.current()).segments.sizes()).toEqual([10_000]);
    expect((await container().current()).segments.sizes()).toEqual([10_000]);
  });

  it("a policy naming a segment's bitmap under accepted/ (where containers keep their copies) is refused, naming the field, and the last good rules stay (review4 defect, fixed)", async () => {
    const { s3, bucket, container } = await shrinkBucket();
    const warm = container();
    expect((await warm.current()).segments.sizes()).toEqual([10_000]);
    // a second segment's object where the first one's accepted copy is kept
    await uploadObject(s3, bucket, "accepted/segments/other.roaring", usersBitmap(5));
    const text = JSON.parse(shrinkPolicy("segments/new.roaring"));
    text.segments.push({ ...text.segments[0], name: "other", bitmap: "accepted/segments/new.roaring" });
    await uploadObject(s3, bucket, "config/policy.json", JSON.stringify(text));
    shrinkClock.advance(60_000);
    expect((await warm.current()).segments.sizes()).toEqual([10_000]);
    expect(
      warm
        .status()
        .refused.map((r) => r.reason)
        .join(),
    ).toMatch(/segments\[1\]\.bitmap/);
  });

  it("dead-letters a campaign message near 1 MiB whose delivery message cannot fit, body unchanged, with the attributes that fit", async () => {
    // a campaign body of 1 MiB - room bytes (it fits the campaign queue) whose payload makes the one-send
    // delivery message over 1 MiB: refused before counting; docs/api.md: the body is never cut, and the
    // attributes that fit are kept in the order error, reason (cut short), sourceMessageId, path. The delivery
    // message is 87 bytes over the campaign body (sends, attributes), so room 80 cannot be delivered
    const skeleton = JSON.stringify({ campaignId: "huge", channel: "push", userIds: [5], payload: "" });
    const bodyWithRoom = (room: number) =>
      JSON.stringify({
        campaignId: "huge",
        channel: "push",
        userIds: [5],
        payload: "x".repeat(SQS_MAX - room - Buffer.byteLength(skeleton)),
      });
    for (const room of [16, 80]) {
      const body = bodyWithRoom(room);
      expect(Buffer.byteLength(body)).toBe(SQS_MAX - room);
      await sendRaw(stack, body);
      expect((await invoke(stack, await receive(stack, 1))).batchItemFailures).toEqual([]);
      const dead = await drainRaw(stack, stack.endpoints.deadLetterQueueUrl);
      expect(dead.map((m) => m.Body === body)).toEqual([true]);
      if (room === 80) {
        expect(dead[0]?.MessageAttributes?.error?.StringValue).toBe("ValidationError");
        expect(dead[0]?.MessageAttributes?.reason?.StringValue).toMatch(/^payload: too large to deliver/);
      }
    }
    expect(await drainDelivery(stack)).toEqual([]);
  });

  it("counts a send exactly when it forwards it, for a payload holding U+FFFF (a character SQS refuses raw)", async () => {
    // payload "\uffff" escaped in the campaign JSON (the campaign queue takes it); push 1/1d: each user is
    // either forwarded by "bad" (and then capped by "next") or not counted by it (and forwarded by "next")
    const bad = JSON.stringify({ campaignId: "bad", channel: "push", userIds: [1, 2, 3], payload: "@" }).replace(
      "@",
      "\\uffff",
    );
    await sendRaw(stack, bad);
    await invoke(stack, await receive(stack, 1));
    const first = (await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.userId));
    await drainRaw(stack, stack.endpoints.deadLetterQueueUrl);
    await sendRaw(stack, JSON.stringify({ campaignId: "next", channel: "push", userIds: [1, 2, 3] }));
    expect((await invoke(stack, await receive(stack, 1))).batchItemFailures).toEqual([]);
    const second = (await drainDelivery(stack)).flatMap((m) => m.sends.map((s) => s.userId));
    expect([...first, ...second].sort()).toEqual([1, 2, 3]);
  });
});
