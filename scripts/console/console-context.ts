// What the console's pages act on: the operator's AWS clients (the default credential chain, or the local
// stack's), the config bucket and policy key, the campaign queue and its DLQ, the archive's place and the
// Redis nodes: the same clients and names the CLI's commands are given, by the same options.
import type { S3Client } from "@aws-sdk/client-s3";
import type { SQSClient } from "@aws-sdk/client-sqs";
import { DEFAULT_POLICY_KEY } from "../../functions/core/capping/policy.ts";
import { DEFAULT_ARCHIVE_PREFIX } from "../../functions/core/shared/decision-archive.ts";
import { ValidationError } from "../../functions/core/shared/errors.ts";
import { DEFAULT_NAMESPACE } from "../../sdk/src/protocol/index.ts";
import { type ArchiveLocation, type OpenArchive, openArchive } from "../archive-query.ts";
import { type AwsOptions, aws, required } from "../cli/aws-options.ts";
import type { RedisOptions } from "../cli/redis-options.ts";

export interface ConsoleContext {
  s3: S3Client;
  sqs: SQSClient;
  bucket: string;
  policyKey: string;
  archive: ArchiveLocation;
  /** Read only the last N days' partitions of the archive (--days); undefined: all. */
  archiveDays: number | undefined;
  /** The campaign queue (where a redrive sends dead letters back) and its DLQ; undefined when not given. */
  campaignQueueUrl: string | undefined;
  deadLetterQueueUrl: string | undefined;
  /** The Redis Cluster nodes and how to reach them (--redis, --tls, --auth-secret-arn); nodes undefined when not given. */
  redis: RedisOptions & { nodes: string[] | undefined };
}

export interface ConsoleOptions extends AwsOptions, Partial<RedisOptions> {
  bucket?: string;
  policyKey?: string;
  archiveBucket?: string;
  archivePrefix?: string;
  days?: number;
  queueUrl?: string;
  to?: string;
}

/** The context from the CLI's options, filled in from the local stack with --local, as every command does. */
export function consoleContext(options: ConsoleOptions): ConsoleContext {
  const { s3, sqs, local } = aws(options);
  const bucket = required(options.bucket, local?.bucket, "--bucket");
  const prefix = options.archivePrefix ?? DEFAULT_ARCHIVE_PREFIX;
  return {
    s3,
    sqs,
    bucket,
    policyKey: options.policyKey ?? DEFAULT_POLICY_KEY,
    archive: { s3, bucket: options.archiveBucket ?? bucket, prefix: prefix.endsWith("/") ? prefix : `${prefix}/` },
    archiveDays: options.days,
    campaignQueueUrl: options.to ?? local?.campaignQueueUrl,
    deadLetterQueueUrl: options.queueUrl ?? local?.deadLetterQueueUrl,
    redis: { ...options, namespace: options.namespace ?? DEFAULT_NAMESPACE, nodes: options.redis ?? local?.redis },
  };
}

/** A setting a page needs that the console was not started with: the error names the option. */
export function needed<T>(value: T | undefined, option: string): T {
  if (value === undefined) throw new ValidationError(option, "not given when the console was started (or --local)");
  return value;
}

/** The archive opened for one request's queries, as `tollgate why --days` opens it; the caller closes it. */
export function openConsoleArchive(context: ConsoleContext): Promise<OpenArchive> {
  const days = context.archiveDays;
  return openArchive(context.archive, days === undefined ? {} : { sinceMs: Date.now() - days * 86_400_000 });
}
