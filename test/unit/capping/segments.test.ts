import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { RoaringBitmap32 } from "roaring-wasm";
import { describe, expect, it } from "vitest";
import { FileObjectStore } from "../../../functions/adapters/file-object-store.ts";
import { parsePolicy } from "../../../functions/core/capping/policy.ts";
import { buildSegments, parseUserIdList } from "../../../functions/core/capping/segment-builder.ts";
import {
  loadSegmentIndex,
  parseBitmap,
  SegmentIndex,
  ZoneIndex,
} from "../../../functions/core/capping/segment-index.ts";
import {
  CorruptBitmapError,
  ObjectNotFoundError,
  SegmentOverlapError,
  ValidationError,
} from "../../../functions/core/shared/errors.ts";

describe("segment builder", () => {
  it("writes portable bitmaps that read back to the same users", () => {
    const built = buildSegments([
      { name: "new", userIds: [1, 2, 3, 4_294_967_295] },
      { name: "active", userIds: [10, 11] },
    ]);
    expect(parseBitmap(built.get("new")!, "new").toArray()).toEqual([1, 2, 3, 4_294_967_295]);
    // the portable format is what CRoaring, Java, Go and Python read; it is also what the library writes for "portable"
    expect(built.get("active")).toEqual(new RoaringBitmap32([10, 11]).serialize("portable"));
  });

  it("refuses overlapping segments and says how many IDs overlap", () => {
    const attempt = () =>
      buildSegments([
        { name: "new", userIds: [1, 2, 3] },
        { name: "active", userIds: [3, 4] },
        { name: "dormant", userIds: [1, 2, 4] },
      ]);
    expect(attempt).toThrow(SegmentOverlapError);
    expect(attempt).toThrow(
      'segments: segments must be disjoint: 1 user ID in both "new" and "active", 2 user IDs in both "new" and "dormant", 1 user ID in both "active" and "dormant"',
    );
  });

  it("refuses IDs outside the unsigned 32-bit range", () => {
    expect(() => buildSegments([{ name: "new", userIds: [1, 4_294_967_296] }])).toThrow(ValidationError);
    expect(() => buildSegments([{ name: "new", userIds: [-1] }])).toThrow("new[0]: expected a user ID");
  });

  it("parses ID lists and names the bad token", () => {
    expect(parseUserIdList("1\n2, 3\t4\n", "ids.txt")).toEqual([1, 2, 3, 4]);
    expect(() => parseUserIdList("1\n2x\n", "ids.txt")).toThrow('ids.txt: "2x" is not a user ID');
    expect(() => parseUserIdList("4294967296", "ids.txt")).toThrow('"4294967296" is not a user ID');
  });
});

describe("segment index", () => {
  const index = new SegmentIndex([new RoaringBitmap32([1, 5, 9]), new RoaringBitmap32([5, 6, 4_000_000_000])]);

  it("resolves a sorted batch: first listed segment wins, others get the default", () => {
    const ids = Uint32Array.from([0, 1, 5, 5, 6, 9, 10, 4_000_000_000]);
    expect(Array.from(index.resolveSorted(ids))).toEqual([2, 0, 0, 0, 1, 0, 2, 1]);
    expect(index.defaultSegment).toBe(2);
  });

  it("resolves dense batches (a bitmap's range read) and sparse ones (an intersection) as a lookup per user does", () => {
    // IDs near 0 and near the top of the range, so dense batches end at 4294967295 too
    const id = fc.oneof(fc.integer({ min: 0, max: 3000 }), fc.integer({ min: 2 ** 32 - 3000, max: 2 ** 32 - 1 }));
    fc.assert(
      fc.property(
        fc.array(fc.array(id, { maxLength: 400 }), { minLength: 1, maxLength: 4 }),
        fc.oneof(
          fc.array(id, { minLength: 1, maxLength: 300 }),
          // consecutive IDs with repeats and gaps: a dense batch
          fc
            .tuple(id, fc.array(fc.integer({ min: 0, max: 2 }), { minLength: 1, maxLength: 300 }))
            .map(([first, steps]) => {
              const ids = [first];
              for (const step of steps) ids.push(Math.min(2 ** 32 - 1, (ids.at(-1) as number) + step));
              return ids;
            }),
        ),
        (memberLists, batch) => {
          const bitmaps = memberLists.map((members) => new RoaringBitmap32(members));
          const sortedIds = Uint32Array.from(batch).sort();
          const lookup = (user: number) => {
            const found = bitmaps.findIndex((bitmap) => bitmap.has(user));
            return found < 0 ? bitmaps.length : found;
          };
          const expected = Array.from(sortedIds, lookup);
          expect(Array.from(new SegmentIndex(bitmaps).resolveSorted(sortedIds))).toEqual(expected);
          // zone bitmaps may not overlap (the index refuses it): each user kept in the first that holds it
          const disjoint = bitmaps.map((bitmap, i) => {
            const own = bitmap.clone();
            for (const earlier of bitmaps.slice(0, i)) own.andNotInPlace(earlier);
            return own;
          });
          const zoneNames = disjoint.map((_, i) => `Etc/GMT+${i}`);
          const zoneExpected = Array.from(sortedIds, (user) => {
            const found = disjoint.findIndex((bitmap) => bitmap.has(user));
            return found < 0 ? disjoint.length : found;
          });
          expect(Array.from(new ZoneIndex(disjoint, zoneNames).resolveSorted(sortedIds))).toEqual(zoneExpected);
        },
      ),
      { numRuns: 200 },
    );
  });

  it("gives every user the default segment when the policy lists none", () => {
    expect(Array.from(new SegmentIndex([]).resolveSorted(Uint32Array.from([1, 2])))).toEqual([0, 0]);
  });

  it("loads the policy's bitmaps from a store and rejects a corrupt one by name", async () => {
    const root = mkdtempSync(join(tmpdir(), "tollgate-"));
    mkdirSync(join(root, "segments"));
    const built = buildSegments([{ name: "new", userIds: [7] }]);
    writeFileSync(join(root, "segments/new.roaring"), built.get("new")!);
    const policy = parsePolicy({
      version: "1",
      channels: ["push"],
      segments: [{ name: "new", bitmap: "segments/new.roaring", caps: {} }],
      default: { name: "rest", caps: {} },
    });
    const store = new FileObjectStore(root);
    const loaded = await loadSegmentIndex(policy, store);
    expect(Array.from(loaded.resolveSorted(Uint32Array.from([6, 7])))).toEqual([1, 0]);
    expect(loaded.sizes()).toEqual([1]);

    writeFileSync(join(root, "segments/new.roaring"), Buffer.from("definitely not a bitmap"));
    await expect(loadSegmentIndex(policy, store)).rejects.toThrow(CorruptBitmapError);
    await expect(loadSegmentIndex(policy, store)).rejects.toThrow(
      "segments/new.roaring: not a valid portable roaring bitmap",
    );

    writeFileSync(join(root, "segments/new.roaring"), built.get("new")!.subarray(0, 5));
    await expect(loadSegmentIndex(policy, store)).rejects.toThrow(CorruptBitmapError);

    await expect(store.get("segments/missing.roaring")).rejects.toThrow(ObjectNotFoundError);
  });
});
