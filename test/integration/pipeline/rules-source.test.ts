// Policy and segment hot swap through the real S3 adapter (fauxqs + @aws-sdk/client-s3), with a fixed clock.
import { CreateBucketCommand, type S3Client } from "@aws-sdk/client-s3";
import { beforeAll, describe, expect, it } from "vitest";
import { S3ObjectStore } from "../../../functions/adapters/s3-object-store.ts";
import { uploadObject } from "../../../functions/app/operator-actions.ts";
import { RulesSource } from "../../../functions/core/capping/rules-source.ts";
import { buildSegments } from "../../../functions/core/capping/segment-builder.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import {
  CorruptBitmapError,
  InvalidPolicyError,
  ObjectNotFoundError,
  RulesUnavailableError,
} from "../../../functions/core/shared/errors.ts";
import { useAwsEmulator } from "../../support/aws-emulator.ts";
import { T0 } from "../../support/rules.ts";

const emulator = useAwsEmulator();
let s3: S3Client;
beforeAll(() => {
  s3 = emulator.s3;
});

const policy = (version: string, bitmap = "segments/new.roaring") => ({
  version,
  channels: ["push"],
  segments: [{ name: "new", bitmap, caps: { push: [{ window: "1d", max: 1 }] } }],
  default: { name: "rest", caps: {} },
});

async function bucketWith(name: string, version: string, members: number[]) {
  await s3.send(new CreateBucketCommand({ Bucket: name }));
  await uploadObject(
    s3,
    name,
    "segments/new.roaring",
    buildSegments([{ name: "new", userIds: members }]).get("new") as Uint8Array,
  );
  await uploadObject(s3, name, "config/policy.json", JSON.stringify(policy(version)));
}

describe("rules source", () => {
  it("picks up a new policy and new bitmaps after the refresh interval, not before", async () => {
    await bucketWith("swap", "v1", [1]);
    const clock = fixedClock(T0);
    const activated: string[] = [];
    const source = new RulesSource({
      store: new S3ObjectStore(s3, "swap"),
      refreshMs: 60_000,
      clock,
      onActivated: (rules) => activated.push(rules.policy.version),
    });
    const first = await source.current();
    expect(first.policy.version).toBe("v1");
    expect(Array.from(first.segments.resolveSorted(Uint32Array.from([1, 2])))).toEqual([0, 1]);

    await uploadObject(s3, "swap", "config/policy.json", JSON.stringify(policy("v2")));
    clock.advance(59_999);
    expect((await source.current()).policy.version).toBe("v1");
    clock.advance(1);
    expect((await source.current()).policy.version).toBe("v2");

    // a re-uploaded bitmap is picked up even when the policy did not change
    await uploadObject(
      s3,
      "swap",
      "segments/new.roaring",
      buildSegments([{ name: "new", userIds: [2] }]).get("new") as Uint8Array,
    );
    clock.advance(60_000);
    expect(Array.from((await source.current()).segments.resolveSorted(Uint32Array.from([1, 2])))).toEqual([1, 0]);
    expect(activated).toEqual(["v1", "v2", "v2"]);
  });

  it("answers fresh() with the rules current() would serve without a refresh, and nothing when one is due", async () => {
    await bucketWith("fresh", "v1", [1]);
    const clock = fixedClock(T0);
    const source = new RulesSource({ store: new S3ObjectStore(s3, "fresh"), refreshMs: 60_000, clock });
    // nothing loaded yet: only current() loads
    expect(source.fresh()).toBeUndefined();
    const first = await source.current();
    expect(source.fresh()).toBe(first);
    expect(source.fresh({ channel: "push" })).toBe(first);
    // a quota rule the policy lacks forces a refresh (at most once a second): fresh() leaves it to current()
    expect(source.fresh({ quotaRule: "new-rule" })).toBeUndefined();
    await uploadObject(s3, "fresh", "config/policy.json", JSON.stringify(policy("v2")));
    clock.advance(59_999);
    expect(source.fresh()?.policy.version).toBe("v1");
    clock.advance(1);
    expect(source.fresh()).toBeUndefined();
    expect((await source.current()).policy.version).toBe("v2");
    expect(source.fresh()?.policy.version).toBe("v2");
  });

  it("keeps the last good rules when a new policy or bitmap is invalid", async () => {
    await bucketWith("bad", "good", [5]);
    const clock = fixedClock(T0);
    const rejected: Error[] = [];
    const source = new RulesSource({
      store: new S3ObjectStore(s3, "bad"),
      refreshMs: 60_000,
      clock,
      onRejected: (e) => rejected.push(e),
    });
    expect((await source.current()).policy.version).toBe("good");

    await uploadObject(s3, "bad", "config/policy.json", JSON.stringify({ ...policy("broken"), channels: [] }));
    clock.advance(60_000);
    expect((await source.current()).policy.version).toBe("good");
    expect(rejected.at(-1)).toBeInstanceOf(InvalidPolicyError);

    await uploadObject(s3, "bad", "config/policy.json", JSON.stringify(policy("new-good")));
    await uploadObject(s3, "bad", "segments/new.roaring", "not a bitmap");
    clock.advance(60_000);
    const still = await source.current();
    expect(still.policy.version).toBe("good");
    expect(Array.from(still.segments.resolveSorted(Uint32Array.from([5])))).toEqual([0]);
    expect(rejected.at(-1)).toBeInstanceOf(CorruptBitmapError);
    expect(rejected.at(-1)?.message).toContain("segments/new.roaring");
  });

  it("fails on a cold start without a valid policy, rather than guessing", async () => {
    await s3.send(new CreateBucketCommand({ Bucket: "cold" }));
    const clock = fixedClock(T0);
    const source = new RulesSource({ store: new S3ObjectStore(s3, "cold"), refreshMs: 60_000, clock });
    // a server fault (RulesUnavailableError), whose cause says which object and why
    const missing = (await source.current().catch((error: unknown) => error)) as RulesUnavailableError;
    expect(missing).toBeInstanceOf(RulesUnavailableError);
    expect(missing.cause).toBeInstanceOf(ObjectNotFoundError);
    await uploadObject(s3, "cold", "config/policy.json", "{ not json");
    clock.advance(1_000);
    const invalid = (await source.current().catch((error: unknown) => error)) as RulesUnavailableError;
    expect(invalid.cause).toBeInstanceOf(InvalidPolicyError);
    expect(invalid.refused).toEqual([
      { key: "config/policy.json", reason: (invalid.cause as Error).message, at: T0 + 1_000 },
    ]);
  });
});
