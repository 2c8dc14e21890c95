// The ports through which the core reads policy files and segment bitmaps, and operator actions publish
// them (S3 in production, files locally).

export interface ObjectStore {
  /** The object's bytes; rejects with ObjectNotFoundError when there is no such key. */
  get(key: string): Promise<Uint8Array>;
  /** A tag that changes whenever the object does (S3: the ETag); rejects with ObjectNotFoundError. */
  etag(key: string): Promise<string>;
}

/** The port through which operator actions publish objects (the policy, segment bitmaps). */
export interface ObjectWriter {
  put(key: string, body: Uint8Array | string): Promise<void>;
}
