// Which segment, and which time zone, each user is in: one roaring bitmap per listed segment or published
// zone, resolved a whole batch at a time (one range or intersection per bitmap instead of one lookup per user
// and bitmap).
// roaring-wasm, not the native `roaring` addon: WebAssembly loads on any Node and CPU, so the Lambda bundle
// works on the runtime and architecture it declares whatever machine built it
// (docs/decisions/0034-bundles-pure-javascript-and-wasm-arm64.md).
import { RoaringBitmap32 } from "roaring-wasm";
import { CorruptBitmapError, ZoneOverlapError } from "../shared/errors.ts";
import type { ObjectStore } from "../shared/object-store.ts";
import type { Policy } from "./policy.ts";

/** A segment's members. Its memory is WebAssembly's: unreachable bitmaps are freed by a finalizer. */
export type Bitmap = RoaringBitmap32;

/** Reads a portable roaring bitmap; `source` names the object in the error when it is not one. */
export function parseBitmap(bytes: Uint8Array, source: string): Bitmap {
  // An empty object would deserialize as an empty bitmap and move every member to the default caps; even
  // a bitmap of no users takes 8 bytes.
  if (bytes.length === 0) throw new CorruptBitmapError(source, { cause: new Error("the object is empty (0 bytes)") });
  let bitmap: Bitmap;
  try {
    bitmap = RoaringBitmap32.deserialize(bytes, "portable");
  } catch (error) {
    throw new CorruptBitmapError(source, { cause: error });
  }
  // a truncated object, or one with bytes after the bitmap, is not the bitmap that was uploaded
  const expected = bitmap.getSerializationSizeInBytes("portable");
  if (expected !== bytes.length) {
    throw new CorruptBitmapError(source, {
      cause: new Error(`${bytes.length} bytes where the bitmap it starts with takes ${expected}`),
    });
  }
  return bitmap;
}

/** A batch whose IDs span at most this many times its length reads each bitmap's range (a dense campaign's). */
const DENSE_SPAN_PER_ID = 4;

/**
 * `each(i, members)` for each bitmap, with its members from the lowest to the highest of `sortedIds` (ascending,
 * not empty), ascending: a dense batch reads each bitmap's range (a fourth of the cost of the intersection, with
 * no bitmap made), any other intersects a bitmap of the batch, since a range would list every member between
 * its IDs. The members may include IDs between the batch's.
 */
function forEachMembers(
  bitmaps: readonly Bitmap[],
  sortedIds: Uint32Array,
  each: (index: number, members: ArrayLike<number>) => void,
): void {
  const lowest = sortedIds[0] as number;
  const end = (sortedIds[sortedIds.length - 1] as number) + 1;
  if (end - lowest <= DENSE_SPAN_PER_ID * sortedIds.length) {
    for (let i = 0; i < bitmaps.length; i++) each(i, (bitmaps[i] as Bitmap).rangeArray(lowest, end));
    return;
  }
  // the temporaries are freed at once rather than left to the finalizer: a busy consumer makes many
  const batch = new RoaringBitmap32(sortedIds);
  for (let i = 0; i < bitmaps.length; i++) {
    const intersection = RoaringBitmap32.and(batch, bitmaps[i] as Bitmap);
    const members = intersection.toUint32Array();
    intersection.dispose();
    each(i, members);
  }
  batch.dispose();
}

export class SegmentIndex {
  /** One bitmap per listed segment, in policy order; users in none get `defaultSegment`. */
  private readonly bitmaps: readonly Bitmap[];
  readonly defaultSegment: number;

  constructor(bitmaps: readonly Bitmap[]) {
    this.bitmaps = bitmaps;
    this.defaultSegment = bitmaps.length;
  }

  /**
   * The segment number of each ID of `sortedIds` (ascending; repeats allowed). On overlap the first listed
   * segment wins.
   */
  resolveSorted(sortedIds: Uint32Array): Uint8Array {
    const result = new Uint8Array(sortedIds.length).fill(this.defaultSegment);
    if (sortedIds.length === 0 || this.bitmaps.length === 0) return result;
    forEachMembers(this.bitmaps, sortedIds, (segment, members) => {
      // Both lists ascend: one merge walk assigns every member (and its repeats) not claimed earlier; a member
      // between the batch's IDs matches none.
      let j = 0;
      for (let k = 0; k < members.length; k++) {
        const id = members[k] as number;
        while ((sortedIds[j] as number) < id) j++;
        for (let r = j; r < sortedIds.length && sortedIds[r] === id; r++) {
          if (result[r] === this.defaultSegment) result[r] = segment;
        }
      }
    });
    return result;
  }

  /** Users per listed segment, in policy order. */
  sizes(): number[] {
    return this.bitmaps.map((bitmap) => bitmap.size);
  }
}

/**
 * Which published zone each user lives in: one bitmap per zone (policy order), users in none get
 * `defaultZone` (the number after the last). A user in two zone bitmaps is refused when the index is built
 * (ZoneOverlapError): unlike segments, zones have no order that could say which one is right.
 */
export class ZoneIndex {
  readonly defaultZone: number;

  constructor(
    private readonly bitmaps: readonly Bitmap[],
    names: readonly string[],
  ) {
    this.defaultZone = bitmaps.length;
    const union = new RoaringBitmap32();
    try {
      bitmaps.forEach((bitmap, i) => {
        if (union.intersects(bitmap)) {
          const j = bitmaps.findIndex((other, k) => k < i && other.intersects(bitmap));
          const count = (bitmaps[j] as Bitmap).andCardinality(bitmap);
          throw new ZoneOverlapError(names[j] as string, names[i] as string, count);
        }
        union.orInPlace(bitmap);
      });
    } finally {
      union.dispose();
    }
  }

  /** The zone number of each ID of `sortedIds` (ascending; repeats allowed): one intersection per zone. */
  resolveSorted(sortedIds: Uint32Array): Uint16Array {
    const result = new Uint16Array(sortedIds.length).fill(this.defaultZone);
    if (sortedIds.length === 0 || this.bitmaps.length === 0) return result;
    forEachMembers(this.bitmaps, sortedIds, (zone, members) => {
      let j = 0;
      for (let k = 0; k < members.length; k++) {
        const id = members[k] as number;
        while ((sortedIds[j] as number) < id) j++;
        for (let r = j; r < sortedIds.length && sortedIds[r] === id; r++) result[r] = zone;
      }
    });
    return result;
  }
}

/** Loads every listed segment's bitmap of `policy` from `store`. */
export async function loadSegmentIndex(policy: Policy, store: ObjectStore): Promise<SegmentIndex> {
  const listed = policy.segments.filter((segment) => segment.bitmap !== undefined);
  const bitmaps = await Promise.all(
    listed.map(async ({ bitmap }) => parseBitmap(await store.get(bitmap as string), bitmap as string)),
  );
  return new SegmentIndex(bitmaps);
}
