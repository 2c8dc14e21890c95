// Builds segment bitmaps (CRoaring portable serialization) from lists of user IDs, refusing overlaps.
import { RoaringBitmap32 } from "roaring-wasm";
import { SegmentOverlapError, ValidationError } from "../shared/errors.ts";
import { MAX_USER_ID } from "../shared/send-fields.ts";

export interface SegmentMembers {
  name: string;
  userIds: Iterable<number>;
}

/** Serialized bitmaps by segment name; throws SegmentOverlapError naming each overlapping pair. */
export function buildSegments(segments: readonly SegmentMembers[]): Map<string, Uint8Array> {
  const bitmaps = segments.map(({ name, userIds }) => {
    const bitmap = new RoaringBitmap32();
    let index = 0;
    for (const id of userIds) {
      if (!Number.isInteger(id) || id < 0 || id > MAX_USER_ID) {
        throw new ValidationError(`${name}[${index}]`, `expected a user ID from 0 to ${MAX_USER_ID}, got ${id}`);
      }
      bitmap.add(id);
      index++;
    }
    bitmap.runOptimize();
    return { name, bitmap };
  });
  try {
    return serializeDisjoint(bitmaps);
  } finally {
    // WebAssembly memory: freed now rather than by the finalizer, since a build may hold millions of users
    for (const { bitmap } of bitmaps) bitmap.dispose();
  }
}

function serializeDisjoint(bitmaps: { name: string; bitmap: RoaringBitmap32 }[]): Map<string, Uint8Array> {
  const overlaps: { a: string; b: string; count: number }[] = [];
  for (let i = 0; i < bitmaps.length; i++) {
    for (let j = i + 1; j < bitmaps.length; j++) {
      const a = bitmaps[i]!;
      const b = bitmaps[j]!;
      const count = a.bitmap.andCardinality(b.bitmap);
      if (count > 0) overlaps.push({ a: a.name, b: b.name, count });
    }
  }
  if (overlaps.length > 0) throw new SegmentOverlapError(overlaps);
  return new Map(bitmaps.map(({ name, bitmap }) => [name, bitmap.serialize("portable")]));
}

/** Parses a text file of user IDs: one per line or separated by commas or whitespace. */
export function parseUserIdList(text: string, source: string): number[] {
  const ids: number[] = [];
  for (const token of text.split(/[\s,]+/)) {
    if (token === "") continue;
    const id = /^[0-9]{1,10}$/.test(token) ? Number(token) : Number.NaN;
    if (!(id <= MAX_USER_ID)) {
      throw new ValidationError(source, `"${token}" is not a user ID (an integer from 0 to ${MAX_USER_ID})`);
    }
    ids.push(id);
  }
  return ids;
}
