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
