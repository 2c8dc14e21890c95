// An ObjectStore (and ObjectWriter) over an S3 bucket. Bitmaps are binary: bodies are read as bytes, never
// as text.
import {
  GetObjectCommand,
  HeadObjectCommand,
  NoSuchKey,
  NotFound,
  PutObjectCommand,
  type S3Client,
} from "@aws-sdk/client-s3";
import { ObjectNotFoundError, WriteConflictError } from "../core/shared/errors.ts";
import type {
  ConditionalObjectStore,
  ObjectHead,
  ObjectStore,
  ObjectWriter,
  TaggedObject,
} from "../core/shared/object-store.ts";

export class S3ObjectStore implements ObjectStore, ObjectWriter, ConditionalObjectStore {
  constructor(
    private readonly s3: S3Client,
    private readonly bucket: string,
  ) {}

  async get(key: string): Promise<Uint8Array> {
    try {
      const object = await this.s3.send(new GetObjectCommand({ Bucket: this.bucket, Key: key }));
      if (!object.Body) throw new ObjectNotFoundError(key);
      return await object.Body.transformToByteArray();
    } catch (error) {
      throw notFound(error, key);
    }
  }

  async put(key: string, body: Uint8Array | string): Promise<void> {
    await this.s3.send(new PutObjectCommand({ Bucket: this.bucket, Key: key, Body: body }));
  }

  async read(key: string): Promise<TaggedObject | undefined> {
    try {
      const object = await this.s3.send(new GetObjectCommand({ Bucket: this.bucket, Key: key }));
      if (!object.Body || !object.ETag) throw new Error(`s3 ${key}: GetObject answered without a body or ETag`);
      return { body: await object.Body.transformToByteArray(), etag: object.ETag };
    } catch (error) {
      if (error instanceof NoSuchKey || error instanceof NotFound) return undefined;
      throw error;
    }
  }

  /** S3's conditional write: `If-Match` on the ETag read, or `If-None-Match: *` for a new object. */
  async putIf(key: string, body: string, expected: string | undefined): Promise<string> {
    try {
      const put = await this.s3.send(
        new PutObjectCommand({
          Bucket: this.bucket,
          Key: key,
          Body: body,
          ...(expected === undefined ? { IfNoneMatch: "*" } : { IfMatch: expected }),
        }),
      );
      return put.ETag ?? "";
    } catch (error) {
      // 412 PreconditionFailed: the object changed; 409 ConditionalRequestConflict: another conditional write
      // to it was in progress
      const status = (error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
      if (status === 412 || status === 409)
        throw new WriteConflictError(`s3 ${key}`, "changed since it was read", { cause: error });
      throw error;
    }
  }

  async head(key: string): Promise<ObjectHead> {
    try {
      const head = await this.s3.send(new HeadObjectCommand({ Bucket: this.bucket, Key: key }));
      const modifiedAt = head.LastModified?.getTime() ?? 0;
      return { etag: head.ETag ?? String(modifiedAt), modifiedAt };
    } catch (error) {
      throw notFound(error, key);
    }
  }
}

function notFound(error: unknown, key: string): unknown {
  if (error instanceof NoSuchKey || error instanceof NotFound)
    return new ObjectNotFoundError(`s3 ${key}`, { cause: error });
  return error;
}
