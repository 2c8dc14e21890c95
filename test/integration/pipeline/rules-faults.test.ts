// Configuration faults through the real S3 adapter (fauxqs + @aws-sdk/client-s3), with a fixed clock: empty
// and truncated bitmaps refused like corrupt ones, a segment shrinking past the allowed share refused
// unless forced (by containers started after the refusal too), a container started after a bad bitmap or
// policy serving the last accepted copies, an unknown channel or quota rule looked up once more before it is judged.
import { CreateBucketCommand, type S3Client } from "@aws-sdk/client-s3";
import { beforeAll, describe, expect, it } from "vitest";
import { S3ObjectStore } from "../../../functions/adapters/s3-object-store.ts";
import { publishSegments, uploadObject } from "../../../functions/app/operator-actions.ts";
import { acceptedCopyKey, acceptedPolicyKey, RulesSource } from "../../../functions/core/capping/rules-source.ts";
import { buildSegments } from "../../../functions/core/capping/segment-builder.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import {
  CorruptBitmapError,
  InvalidPolicyError,
  RulesUnavailableError,
  SegmentShrinkError,
} from "../../../functions/core/shared/errors.ts";
import { useAwsEmulator } from "../../support/aws-emulator.ts";
import { T0 } from "../../support/rules.ts";

const emulator = useAwsEmulator();
let s3: S3Client;
beforeAll(() => {
  s3 = emulator.s3;
});

const policy = (version: string, channels = ["push"]) => ({
  version,
  channels,
  segments: [{ name: "new", bitmap: "segments/new.roaring", caps: { push: [{ window: "1d", max: 1 }] } }],
  default: { name: "rest", caps: {} },
});
const bitmapOf = (userIds: number[]) => buildSegments([{ name: "new", userIds }]).get("new") as Uint8Array;
const range = (n: number) => Array.from({ length: n }, (_, i) => i);

let buckets = 0;
async function sourceWith(members: number[], options: { maxShrink?: number } = {}) {
  const bucket = `rules-${++buckets}`;
  await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  await uploadObject(s3, bucket, "segments/new.roaring", bitmapOf(members));
  await uploadObject(s3, bucket, "config/policy.json", JSON.stringify(policy("v1")));
  const clock = fixedClock(T0);
  const rejected: Error[] = [];
  const source = new RulesSource({
    store: new S3ObjectStore(s3, bucket),
    refreshMs: 60_000,
    clock,
    onRejected: (error) => rejected.push(error),
    ...options,
  });
  return { bucket, clock, source, rejected };
}

describe("bitmap objects", () => {
  it("refuses a 0-byte bitmap on a cold start: rules unavailable, never the default caps for everyone", async () => {
    const { bucket, source } = await sourceWith([1]);
    await uploadObject(s3, bucket, "segments/new.roaring", new Uint8Array(0));
    const error = (await source.current().catch((error: unknown) => error)) as RulesUnavailableError;
    expect(error).toBeInstanceOf(RulesUnavailableError);
    expect(error.cause).toBeInstanceOf(CorruptBitmapError);
    expect(error.refused[0]?.key).toBe("segments/new.roaring");
    expect(error.refused[0]?.reason).toContain("empty");
  });

  it("keeps the last good rules when a bitmap becomes a 0-byte object, and says why in status", async () => {
    const { bucket, clock, source, rejected } = await sourceWith(range(20_000));
    expect(Array.from((await source.current()).segments.resolveSorted(Uint32Array.from([5])))).toEqual([0]);
    await uploadObject(s3, bucket, "segments/new.roaring", new Uint8Array(0));
    clock.advance(60_000);
    expect(Array.from((await source.current()).segments.resolveSorted(Uint32Array.from([5])))).toEqual([0]);
    expect(rejected.at(-1)).toBeInstanceOf(CorruptBitmapError);
    expect(source.status()).toEqual({
      policyVersion: "v1",
      refused: [{ key: "segments/new.roaring", reason: (rejected.at(-1) as Error).message, at: T0 + 60_000 }],
    });
  });

  it("a container started after a 0-byte bitmap over a live segment serves the last accepted copy, and says why in status", async () => {
    const { bucket, clock, source } = await sourceWith(range(20_000));
    expect((await source.current()).segments.sizes()).toEqual([20_000]);
    await uploadObject(s3, bucket, "segments/new.roaring", new Uint8Array(0));
    const rejected: Error[] = [];
    const cold = new RulesSource({
      store: new S3ObjectStore(s3, bucket),
      refreshMs: 60_000,
      clock,
      onRejected: (error) => rejected.push(error),
    });
    const rules = await cold.current();
    expect(rules.segments.sizes()).toEqual([20_000]);
    expect(Array.from(rules.segments.resolveSorted(Uint32Array.from([5, 19_999])))).toEqual([0, 0]);
    expect(rejected.at(-1)).toBeInstanceOf(CorruptBitmapError);
    expect(cold.status()).toEqual({
      policyVersion: "v1",
      refused: [{ key: "segments/new.roaring", reason: (rejected.at(-1) as Error).message, at: T0 }],
    });
    // refused at every refresh until an upload replaces it
    clock.advance(60_000);
    expect((await cold.current()).segments.sizes()).toEqual([20_000]);
    expect(cold.status().refused.map(({ key }) => key)).toEqual(["segments/new.roaring"]);
    await uploadObject(s3, bucket, "segments/new.roaring", bitmapOf(range(15_000)));
    clock.advance(60_000);
    expect((await cold.current()).segments.sizes()).toEqual([15_000]);
    expect(cold.status().refused).toEqual([]);
  });

  it("refuses a truncated bitmap and one with trailing bytes", async () => {
    const { bucket, clock, source, rejected } = await sourceWith(range(5_000).map((i) => i * 3));
    await source.current();
    const whole = bitmapOf(range(5_000).map((i) => i * 7));
    await uploadObject(s3, bucket, "segments/new.roaring", whole.subarray(0, whole.length - 10));
    clock.advance(60_000);
    await source.current();
    expect(rejected.at(-1)).toBeInstanceOf(CorruptBitmapError);
    await uploadObject(s3, bucket, "segments/new.roaring", Buffer.concat([whole, Buffer.from([0, 0])]));
    clock.advance(60_000);
    await source.current();
    expect(rejected).toHaveLength(2);
    expect(rejected.at(-1)).toBeInstanceOf(CorruptBitmapError);
  });
});

describe("policy objects", () => {
  it("a container started while the policy fails validation serves the last accepted policy, and says why in status", async () => {
    const { bucket, clock, source } = await sourceWith(range(10));
    await source.current();
    await uploadObject(s3, bucket, "config/policy.json", JSON.stringify({ ...policy("v2"), channels: [] }));
    const rejected: Error[] = [];
    const cold = new RulesSource({
      store: new S3ObjectStore(s3, bucket),
      refreshMs: 60_000,
      clock,
      onRejected: (error) => rejected.push(error),
    });
    const rules = await cold.current();
    expect(rules.policy.version).toBe("v1");
    expect(rules.segments.sizes()).toEqual([10]);
    expect(rejected.at(-1)).toBeInstanceOf(InvalidPolicyError);
    expect(cold.status().refused).toEqual([
      { key: "config/policy.json", reason: (rejected.at(-1) as Error).message, at: T0 },
    ]);
    clock.advance(60_000);
    expect((await cold.current()).policy.version).toBe("v1");
    expect(cold.status().refused.map(({ key }) => key)).toEqual(["config/policy.json"]);
    await uploadObject(s3, bucket, "config/policy.json", JSON.stringify(policy("v3")));
    clock.advance(60_000);
    expect((await cold.current()).policy.version).toBe("v3");
    expect(cold.status().refused).toEqual([]);
  });

  it("a container started while the policy and its last accepted copy both fail serves nothing: rules unavailable", async () => {
    const { bucket, clock, source } = await sourceWith(range(10));
    await source.current();
    await uploadObject(s3, bucket, acceptedPolicyKey, "{}");
    await uploadObject(s3, bucket, "config/policy.json", "{");
    const cold = new RulesSource({ store: new S3ObjectStore(s3, bucket), refreshMs: 60_000, clock });
    const error = (await cold.current().catch((error: unknown) => error)) as RulesUnavailableError;
    expect(error).toBeInstanceOf(RulesUnavailableError);
    expect(error.refused[0]?.key).toBe("config/policy.json");
    expect(error.refused[0]?.reason).toContain(`the last accepted policy cannot be served (${acceptedPolicyKey}`);
  });
});

describe("a segment that shrinks", () => {
  it("by 60% is refused, and the last good rules stay", async () => {
    const { bucket, clock, source, rejected } = await sourceWith(range(10_000));
    await source.current();
    await publishSegments(s3, bucket, [{ name: "new.roaring", bytes: bitmapOf(range(4_000)) }]);
    clock.advance(60_000);
    const rules = await source.current();
    expect(rules.segments.sizes()).toEqual([10_000]);
    expect(rejected.at(-1)).toBeInstanceOf(SegmentShrinkError);
    expect(rejected.at(-1)?.message).toContain("from 10000 to 4000 users (-60%");
    expect(source.status().refused[0]?.key).toBe("segments/new.roaring");
  });

  it("by 60% is accepted when the operator forces that upload, and the marker forces no later one", async () => {
    const { bucket, clock, source, rejected } = await sourceWith(range(10_000));
    await source.current();
    await publishSegments(s3, bucket, [{ name: "new.roaring", bytes: bitmapOf(range(4_000)) }], { allowShrink: true });
    clock.advance(60_000);
    expect((await source.current()).segments.sizes()).toEqual([4_000]);
    expect(rejected).toEqual([]);
    // the marker named the forced upload's ETag: the next 60% shrink is refused again
    await publishSegments(s3, bucket, [{ name: "new.roaring", bytes: bitmapOf(range(1_600)) }]);
    clock.advance(60_000);
    expect((await source.current()).segments.sizes()).toEqual([4_000]);
    expect(rejected.at(-1)).toBeInstanceOf(SegmentShrinkError);
  });

  it("by 99% is refused by a container started after the refusal too, which serves the last accepted copy", async () => {
    const { bucket, clock, source } = await sourceWith(range(10_000));
    await source.current();
    await publishSegments(s3, bucket, [{ name: "new.roaring", bytes: bitmapOf(range(100)) }]);
    clock.advance(60_000);
    expect((await source.current()).segments.sizes()).toEqual([10_000]);
    const rejected: Error[] = [];
    const cold = new RulesSource({
      store: new S3ObjectStore(s3, bucket),
      refreshMs: 60_000,
      clock,
      onRejected: (error) => rejected.push(error),
    });
    const rules = await cold.current();
    expect(rules.segments.sizes()).toEqual([10_000]);
    expect(Array.from(rules.segments.resolveSorted(Uint32Array.from([5, 9_999])))).toEqual([0, 0]);
    expect(rejected.at(-1)?.message).toContain("from 10000 to 100 users (-99%");
    // refused at every refresh until an upload replaces it, and named in health meanwhile
    clock.advance(60_000);
    expect((await cold.current()).segments.sizes()).toEqual([10_000]);
    expect(rejected).toHaveLength(2);
    expect(cold.status().refused.map(({ key }) => key)).toEqual(["segments/new.roaring"]);
  });

  it("forced on one container is accepted by containers started later, and later shrinks compare with it", async () => {
    const { bucket, clock, source } = await sourceWith(range(10_000));
    await source.current();
    await publishSegments(s3, bucket, [{ name: "new.roaring", bytes: bitmapOf(range(4_000)) }], { allowShrink: true });
    clock.advance(60_000);
    expect((await source.current()).segments.sizes()).toEqual([4_000]);
    const cold = () => new RulesSource({ store: new S3ObjectStore(s3, bucket), refreshMs: 60_000, clock });
    expect((await cold().current()).segments.sizes()).toEqual([4_000]);
    // 4,000 -> 2,500 is within the 50% allowed from the last accepted bitmap, for old and new containers
    await publishSegments(s3, bucket, [{ name: "new.roaring", bytes: bitmapOf(range(2_500)) }]);
    clock.advance(60_000);
    expect((await source.current()).segments.sizes()).toEqual([2_500]);
    expect((await cold().current()).segments.sizes()).toEqual([2_500]);
  });

  it("refused on a cold start whose last accepted copy is gone: rules unavailable, never the shrunk segment", async () => {
    const { bucket, clock, source } = await sourceWith(range(10_000));
    await source.current();
    await uploadObject(s3, bucket, acceptedCopyKey("new"), new Uint8Array(0));
    await publishSegments(s3, bucket, [{ name: "new.roaring", bytes: bitmapOf(range(100)) }]);
    clock.advance(60_000);
    const cold = new RulesSource({ store: new S3ObjectStore(s3, bucket), refreshMs: 60_000, clock });
    const error = (await cold.current().catch((error: unknown) => error)) as RulesUnavailableError;
    expect(error).toBeInstanceOf(RulesUnavailableError);
    expect(error.refused[0]?.key).toBe("segments/new.roaring");
    expect(error.refused[0]?.reason).toContain("from 10000 to 100 users");
    expect(error.refused[0]?.reason).toContain(`the last accepted copy cannot be served (${acceptedCopyKey("new")}`);
  });

  it("by no more than the configured share is accepted", async () => {
    const { bucket, clock, source, rejected } = await sourceWith(range(10_000), { maxShrink: 0.7 });
    await source.current();
    await publishSegments(s3, bucket, [{ name: "new.roaring", bytes: bitmapOf(range(4_000)) }]);
    clock.advance(60_000);
    expect((await source.current()).segments.sizes()).toEqual([4_000]);
    expect(rejected).toEqual([]);
  });
});

describe("an unknown channel", () => {
  it("makes one refresh before it is judged, so a newly added channel is known at once", async () => {
    const { bucket, clock, source } = await sourceWith([1]);
    expect((await source.current()).policy.channels).toEqual(["push"]);
    await uploadObject(s3, bucket, "config/policy.json", JSON.stringify(policy("v2", ["push", "sms"])));
    clock.advance(1_000);
    // a known channel is served from the rules in service until the refresh interval
    expect((await source.current({ channel: "push" })).policy.version).toBe("v1");
    expect((await source.current({ channel: "sms" })).policy.version).toBe("v2");
  });

  it("does not send every message of an unknown channel to the store: one refresh a second at most", async () => {
    const { bucket, clock, source } = await sourceWith([1]);
    await source.current();
    await uploadObject(s3, bucket, "config/policy.json", JSON.stringify(policy("v2", ["push", "sms"])));
    clock.advance(999);
    expect((await source.current({ channel: "sms" })).policy.version).toBe("v1");
    clock.advance(1);
    expect((await source.current({ channel: "sms" })).policy.version).toBe("v2");
  });
});

describe("an unknown quota rule", () => {
  const withQuota = (version: string) => ({
    ...policy(version),
    quotas: [{ name: "api-new", mode: "approximate", limits: [{ window: "1s", max: 10 }] }],
  });

  it("makes one refresh before a sync is answered, even just after the last check; then one a second at most", async () => {
    const { bucket, clock, source } = await sourceWith([1]);
    await source.current();
    await uploadObject(s3, bucket, "config/policy.json", JSON.stringify(withQuota("v2")));
    clock.advance(10);
    // a known (or no) rule is served from the rules in service until the refresh interval
    expect((await source.current()).policy.version).toBe("v1");
    expect((await source.current({ quotaRule: "api-new" })).policy.quotas.has("api-new")).toBe(true);
    // a sync for a rule no policy has: one forced refresh, then none for a second
    await uploadObject(s3, bucket, "config/policy.json", JSON.stringify(withQuota("v3")));
    expect((await source.current({ quotaRule: "nope" })).policy.version).toBe("v2");
    clock.advance(999);
    expect((await source.current({ quotaRule: "nope" })).policy.version).toBe("v2");
    clock.advance(1);
    expect((await source.current({ quotaRule: "nope" })).policy.version).toBe("v3");
  });
});
