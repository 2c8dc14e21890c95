// Zone bitmaps through the real S3 adapter (fauxqs + @aws-sdk/client-s3), with a fixed clock: loaded beside
// the segments, refreshed by ETag, and held to the segments' rules (a corrupt upload or two zones sharing a
// user keep the last good rules; a cold start after a refused upload serves the accepted copy).
import { CreateBucketCommand, type S3Client } from "@aws-sdk/client-s3";
import { beforeAll, describe, expect, it } from "vitest";
import { S3ObjectStore } from "../../../functions/adapters/s3-object-store.ts";
import { uploadObject } from "../../../functions/app/operator-actions.ts";
import { zoneBitmapKey } from "../../../functions/core/capping/policy.ts";
import { acceptedZoneCopyKey, RulesSource } from "../../../functions/core/capping/rules-source.ts";
import { buildSegments } from "../../../functions/core/capping/segment-builder.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { CorruptBitmapError, ZoneOverlapError } from "../../../functions/core/shared/errors.ts";
import { useAwsEmulator } from "../../support/aws-emulator.ts";
import { T0 } from "../../support/rules.ts";

const emulator = useAwsEmulator();
let s3: S3Client;
beforeAll(() => {
  s3 = emulator.s3;
});

const ZONES = ["Asia/Tokyo", "Europe/Paris"];
const policy = {
  version: "zones.1",
  channels: ["push"],
  segments: [],
  default: { name: "everyone", caps: {} },
  zones: ZONES,
  quietHours: { push: [{ from: "21:00", to: "08:00" }] },
};
const bitmap = (userIds: number[]) => buildSegments([{ name: "z", userIds }]).get("z") as Uint8Array;

async function bucketWith(name: string, tokyo: number[], paris: number[]) {
  await s3.send(new CreateBucketCommand({ Bucket: name }));
  await uploadObject(s3, name, zoneBitmapKey("Asia/Tokyo"), bitmap(tokyo));
  await uploadObject(s3, name, zoneBitmapKey("Europe/Paris"), bitmap(paris));
  await uploadObject(s3, name, "config/policy.json", JSON.stringify(policy));
}
const zonesOf = async (source: RulesSource, ids: number[]) =>
  Array.from((await source.current()).zones?.resolveSorted(Uint32Array.from(ids)) ?? []);

describe("zone bitmaps", () => {
  it("resolves each user's zone, picks up a re-upload, and keeps the last good zones when two share a user", async () => {
    await bucketWith("zones-swap", [1, 2], [3]);
    const clock = fixedClock(T0);
    const rejected: Error[] = [];
    const source = new RulesSource({
      store: new S3ObjectStore(s3, "zones-swap"),
      refreshMs: 60_000,
      clock,
      onRejected: (error) => rejected.push(error),
    });
    // zone numbers in policy order; 2 = the default zone
    expect(await zonesOf(source, [1, 3, 4])).toEqual([0, 1, 2]);

    await uploadObject(s3, "zones-swap", zoneBitmapKey("Europe/Paris"), bitmap([3, 4]));
    clock.advance(60_000);
    expect(await zonesOf(source, [1, 3, 4])).toEqual([0, 1, 1]);

    // user 1 in both: refused, the zones in service stay
    await uploadObject(s3, "zones-swap", zoneBitmapKey("Europe/Paris"), bitmap([1, 3, 4]));
    clock.advance(60_000);
    expect(await zonesOf(source, [1, 3, 4])).toEqual([0, 1, 1]);
    expect(rejected.at(-1)).toBeInstanceOf(ZoneOverlapError);
    expect(source.status().refused.map((refusal) => refusal.reason)).toEqual([
      "zones: zones/Asia/Tokyo.roaring and zones/Europe/Paris.roaring share 1 users; a user lives in one zone",
    ]);
  });

  it("serves a zone's accepted copy on a cold start after a corrupt upload of it", async () => {
    await bucketWith("zones-cold", [1, 2], [3]);
    const store = new S3ObjectStore(s3, "zones-cold");
    const first = new RulesSource({ store, refreshMs: 60_000, clock: fixedClock(T0) });
    expect(await zonesOf(first, [1, 3])).toEqual([0, 1]);
    expect((await store.get(acceptedZoneCopyKey("Europe/Paris"))).length).toBeGreaterThan(0);

    await uploadObject(s3, "zones-cold", zoneBitmapKey("Europe/Paris"), new Uint8Array(0));
    const rejected: Error[] = [];
    const cold = new RulesSource({
      store,
      refreshMs: 60_000,
      clock: fixedClock(T0 + 1_000),
      onRejected: (error) => rejected.push(error),
    });
    expect(await zonesOf(cold, [1, 3])).toEqual([0, 1]);
    expect(rejected[0]).toBeInstanceOf(CorruptBitmapError);
    expect(rejected[0]?.message).toContain("zones/Europe/Paris.roaring");
  });
});
