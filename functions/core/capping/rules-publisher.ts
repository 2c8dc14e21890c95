// Publishing the rules (operator actions): a policy is validated before it is uploaded, bitmaps are all
// checked before the first is uploaded, and bitmaps go up before the policy that names them, so a
// container never loads a policy whose bitmap is not there yet.
import type { ObjectStore, ObjectWriter } from "../shared/object-store.ts";
import { DEFAULT_POLICY_KEY, type Policy, parsePolicyText } from "./policy.ts";
import { allowShrinkMarkerKey } from "./rules-source.ts";
import { buildSegments } from "./segment-builder.ts";
import { parseBitmap } from "./segment-index.ts";

/** Validates the policy text, then uploads it; an invalid policy (InvalidPolicyError) uploads nothing. */
export async function publishPolicy(store: ObjectWriter, text: string, key = DEFAULT_POLICY_KEY): Promise<Policy> {
  const policy = parsePolicyText(text);
  await store.put(key, text);
  return policy;
}

export interface SegmentFile {
  /** The object's name under segments/ (e.g. "new.roaring"). */
  name: string;
  bytes: Uint8Array;
  /** Where the bytes came from, for the error when they are not a bitmap (default: the name). */
  source?: string;
}

/**
 * Checks every bitmap (CorruptBitmapError names the bad one), then uploads each as segments/<name>. With
 * `allowShrink`, each upload also gets its force marker (the ETag and write time of the upload it allows), so consumers accept it even
 * when it shrinks its segment by more than SEGMENT_MAX_SHRINK_PERCENT.
 */
export async function publishSegments(
  store: ObjectWriter & Partial<Pick<ObjectStore, "head">>,
  files: readonly SegmentFile[],
  options: { allowShrink?: boolean } = {},
): Promise<{ key: string; bytes: number }[]> {
  for (const { name, bytes, source } of files) parseBitmap(bytes, source ?? name);
  const published: { key: string; bytes: number }[] = [];
  for (const { name, bytes } of files) {
    const key = `segments/${name}`;
    await store.put(key, bytes);
    if (options.allowShrink) {
      if (!store.head) throw new Error("--allow-shrink needs a store that tells an object's ETag");
      const { etag, modifiedAt } = await store.head(key);
      await store.put(allowShrinkMarkerKey(key), JSON.stringify({ etag, modifiedAt }));
    }
    published.push({ key, bytes: bytes.length });
  }
  return published;
}

/**
 * Builds each segment's bitmap from its members and uploads them, then the policy (written as given, to
 * the default key).
 */
export async function publishRules<Document extends { segments: readonly { name: string; bitmap: string }[] }>(
  store: ObjectWriter,
  policy: Document,
  members: Record<string, readonly number[]>,
): Promise<void> {
  const built = buildSegments(policy.segments.map(({ name }) => ({ name, userIds: members[name] ?? [] })));
  for (const { name, bitmap } of policy.segments) await store.put(bitmap, built.get(name) as Uint8Array);
  await store.put(DEFAULT_POLICY_KEY, JSON.stringify(policy, null, 2));
}
