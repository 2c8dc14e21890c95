// The port through which the core reads policy files and segment bitmaps (S3 in production, files locally).

export interface ObjectStore {
  /** The object's bytes; rejects with ObjectNotFoundError when there is no such key. */
  get(key: string): Promise<Uint8Array>;
  /** A tag that changes whenever the object does (S3: the ETag); rejects with ObjectNotFoundError. */
  etag(key: string): Promise<string>;
}
