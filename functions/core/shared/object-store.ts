// The ports through which the core reads policy files and segment bitmaps, and operator actions publish
// them (S3 in production, files locally).

export interface ObjectStore {
  /** The object's bytes; rejects with ObjectNotFoundError when there is no such key. */
  get(key: string): Promise<Uint8Array>;
  /** What a HEAD of the object tells (S3: ETag and Last-Modified); rejects with ObjectNotFoundError. */
  head(key: string): Promise<ObjectHead>;
}

export interface ObjectHead {
  /** A tag that changes whenever the object does. */
  etag: string;
  /** When the store last wrote the object (ms since the epoch, the store's clock, whole seconds on S3). */
  modifiedAt: number;
}

/** The port through which operator actions publish objects (the policy, segment bitmaps). */
export interface ObjectWriter {
  put(key: string, body: Uint8Array | string): Promise<void>;
}

/** An object's bytes and the tag of exactly those bytes, read together. */
export interface TaggedObject {
  body: Uint8Array;
  etag: string;
}

/**
 * Compare-and-set on one object (the policy, which more than one team edits): a write names the tag of the
 * version it was made from, and the store refuses it (WriteConflictError) when the object changed since.
 */
export interface ConditionalObjectStore {
  /** The object and its tag; undefined when there is no such key. */
  read(key: string): Promise<TaggedObject | undefined>;
  /**
   * Writes `body` only if the object's tag is still `expected` (undefined: only if there is no object yet);
   * resolves with the new tag, rejects with WriteConflictError when the condition does not hold.
   */
  putIf(key: string, body: string, expected: string | undefined): Promise<string>;
}
