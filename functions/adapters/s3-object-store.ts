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
import { ObjectNotFoundError } from "../core/shared/errors.ts";
import type { ObjectHead, ObjectStore, ObjectWriter } from "../core/shared/object-store.ts";

export class S3ObjectStore implements ObjectStore, ObjectWriter {
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
