// The decision archive's writers (the ArchiveWriter port): on AWS, Firehose records (Firehose gzips them
// and writes `<prefix>dt=YYYY-MM-DD/hour=HH/` objects by arrival time); locally, and wherever Firehose is
// not wanted, the same gzipped NDJSON objects under the same partitions, written to S3 directly.
import { randomUUID } from "node:crypto";
import { promisify } from "node:util";
import { gzip } from "node:zlib";
import { FirehoseClient, PutRecordBatchCommand } from "@aws-sdk/client-firehose";
import { PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import type { ArchiveChunk, ArchiveWriter } from "../core/shared/decision-archive.ts";

const gzipped = promisify(gzip);

/** `dt=YYYY-MM-DD/hour=HH/` of a time, in UTC, as Firehose's `!{timestamp:...}` prefix writes it. */
export function partitionOf(ms: number): string {
  const iso = new Date(ms).toISOString();
  return `dt=${iso.slice(0, 10)}/hour=${iso.slice(11, 13)}/`;
}

/** One gzipped NDJSON object per chunk, partitioned by the time the chunk was sealed. */
export class S3ArchiveWriter implements ArchiveWriter {
  /** Objects of about 8 MiB before compression: a PUT per ~40,000 decisions. */
  readonly maxChunkBytes = 8 * 1024 * 1024;

  constructor(
    private readonly s3: S3Client,
    private readonly bucket: string,
    /** Ends in "/" (e.g. "archive/decisions/"). */
    private readonly prefix: string,
  ) {}

  async write(chunk: ArchiveChunk): Promise<void> {
    // zlib's async gzip runs on the thread pool, off the thread that decides; level 1: NDJSON still shrinks
    // about 8x, for a fraction of the default level's CPU
    const body = await gzipped(chunk.body, { level: 1 });
    const key = `${this.prefix}${partitionOf(chunk.sealedAt)}decisions-${chunk.sealedAt}-${randomUUID()}.ndjson.gz`;
    await this.s3.send(
      new PutObjectCommand({
        Bucket: this.bucket,
        Key: key,
        Body: body,
        ContentType: "application/x-ndjson",
        ContentEncoding: "gzip",
      }),
    );
  }
}

/** One Firehose record per chunk (chunks are sealed below Firehose's 1,000 KiB a record). */
export class FirehoseArchiveWriter implements ArchiveWriter {
  /** Firehose takes records of up to 1,000 KiB. */
  readonly maxChunkBytes = 900 * 1024;

  constructor(
    private readonly firehose: FirehoseClient,
    private readonly streamName: string,
  ) {}

  async write(chunk: ArchiveChunk): Promise<void> {
    const reply = await this.firehose.send(
      new PutRecordBatchCommand({
        DeliveryStreamName: this.streamName,
        Records: [{ Data: new TextEncoder().encode(chunk.body) }],
      }),
    );
    // a 200 can carry a failed record: the archive retries the chunk
    if ((reply.FailedPutCount ?? 0) > 0) {
      const failed = reply.RequestResponses?.find((entry) => entry.ErrorCode);
      throw new Error(`Firehose refused the record: ${failed?.ErrorCode}: ${failed?.ErrorMessage}`);
    }
  }
}

export function createFirehoseClient(region: string): FirehoseClient {
  return new FirehoseClient({ region, requestHandler: { connectionTimeout: 2_000, requestTimeout: 10_000 } });
}
