// Which segment each user is in: one roaring bitmap per listed segment, resolved a whole batch at a time
// (one intersection per segment instead of one lookup per user and segment).
import roaring from "roaring";
import { CorruptBitmapError } from "../shared/errors.ts";
import type { ObjectStore } from "../shared/object-store.ts";
import type { Policy } from "./policy.ts";

const { RoaringBitmap32 } = roaring;
type Bitmap = InstanceType<typeof RoaringBitmap32>;

/** Reads a portable roaring bitmap; `source` names the object in the error when it is not one. */
export function parseBitmap(bytes: Uint8Array, source: string): Bitmap {
  try {
    return RoaringBitmap32.deserialize(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength), "portable");
  } catch (error) {
    throw new CorruptBitmapError(source, { cause: error });
  }
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
    const batch = new RoaringBitmap32(sortedIds);
    for (let segment = 0; segment < this.bitmaps.length; segment++) {
      const members = RoaringBitmap32.and(batch, this.bitmaps[segment] as Bitmap).toUint32Array();
      // Both lists ascend: one merge walk assigns every member (and its repeats) not claimed earlier.
      let j = 0;
      for (let k = 0; k < members.length; k++) {
        const id = members[k] as number;
        while ((sortedIds[j] as number) < id) j++;
        for (let r = j; r < sortedIds.length && sortedIds[r] === id; r++) {
          if (result[r] === this.defaultSegment) result[r] = segment;
        }
      }
    }
    return result;
  }

  /** Users per listed segment, in policy order. */
  sizes(): number[] {
    return this.bitmaps.map((bitmap) => bitmap.size);
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
