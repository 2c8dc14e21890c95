// The operator actions, wired to real clients: publish the policy and segment bitmaps to the bucket, push
// a campaign onto the campaign queue, ask what a campaign would do (its what-if). The CLI, the demo, the bench and the tests use these; a Lambda could.
import type { S3Client } from "@aws-sdk/client-s3";
import type { SQSClient } from "@aws-sdk/client-sqs";
import { RedisCapStore, type TollgateCluster } from "../adapters/redis-cluster.ts";
import { S3ObjectStore } from "../adapters/s3-object-store.ts";
import { SqsCampaignQueue } from "../adapters/sqs-sinks.ts";
import { type CampaignPush, type PolicyInService, pushCampaign as push } from "../core/capping/campaign-push.ts";
import { Capper } from "../core/capping/capper.ts";
import { DEFAULT_POLICY_KEY, type Policy, parsePolicyText } from "../core/capping/policy.ts";
import { type EditedPolicy, editPolicy, ifPolicyUnchanged, uploadedPolicy } from "../core/capping/policy-edits.ts";
import {
  publishPolicy as publishPolicyTo,
  publishRules,
  publishSegments as publishSegmentsTo,
  type SegmentFile,
} from "../core/capping/rules-publisher.ts";
import { RulesSource } from "../core/capping/rules-source.ts";
import { audit } from "./audit.ts";
import { campaignWhatIf, type WhatIfCampaign, type WhatIfOptions, type WhatIfReport } from "./campaign-what-if.ts";

/** One object, as given (tests use it to put a broken policy or bitmap in place). */
export function uploadObject(s3: S3Client, bucket: string, key: string, body: Uint8Array | string): Promise<void> {
  return new S3ObjectStore(s3, bucket).put(key, body);
}

/**
 * `policy upload`: the file's policy written over the one in the bucket with compare-and-set, keeping the
 * bucket's quota rules and tenants when the file has none and refusing a file whose rules differ from them
 * unless `replaceQuotas` (policy-edits.ts), with an audit line. With `opened` (an editor's save: the text it
 * opened, undefined when there was no policy) it is written only while the object is still that text, else
 * refused with ChangedSinceOpenedError. Resolves with the policy written and the one it replaced.
 */
export async function uploadPolicy(
  s3: S3Client,
  bucket: string,
  text: string,
  options: { key?: string; replaceQuotas?: boolean; opened?: { text: string | undefined } } = {},
): Promise<EditedPolicy> {
  const { key, opened, ...upload } = options;
  const edit = uploadedPolicy(text, upload);
  const edited = await editPolicy(
    new S3ObjectStore(s3, bucket),
    opened === undefined ? edit : ifPolicyUnchanged(opened.text, edit, key),
    key === undefined ? {} : { key },
  );
  auditUpload(bucket, edited.policy, edited.previous?.version);
  return edited;
}

/** Validates the policy, then uploads it as given, unconditionally (the demo's and the tests' setup), audited. */
export async function publishPolicy(s3: S3Client, bucket: string, text: string, key?: string): Promise<Policy> {
  const policy = await publishPolicyTo(new S3ObjectStore(s3, bucket), text, key);
  auditUpload(bucket, policy, undefined);
  return policy;
}

function auditUpload(bucket: string, policy: Policy, previousVersion: string | undefined): void {
  audit({
    action: "policy-upload",
    bucket,
    previousVersion,
    version: policy.version,
    quotaRules: [...policy.quotas.keys()],
    tenants: policy.tenancy.list().map((tenant) => tenant.name),
  });
}

/** Checks every bitmap, then uploads each to segments/<name>; a bad one uploads nothing. */
export function publishSegments(
  s3: S3Client,
  bucket: string,
  files: readonly SegmentFile[],
  options: { allowShrink?: boolean } = {},
): Promise<{ key: string; bytes: number }[]> {
  return publishSegmentsTo(new S3ObjectStore(s3, bucket), files, options);
}

/** Builds the bitmaps of a policy's segments from their members and uploads them, then the policy. */
export function uploadRules<Document extends { segments: readonly { name: string; bitmap: string }[] }>(
  s3: S3Client,
  bucket: string,
  policy: Document,
  members: Record<string, readonly number[]>,
): Promise<void> {
  return publishRules(new S3ObjectStore(s3, bucket), policy, members);
}

/** The policy the consumers load from the bucket (InvalidPolicyError when it does not parse). */
export async function policyInService(s3: S3Client, bucket: string, key = DEFAULT_POLICY_KEY): Promise<Policy> {
  const bytes = await new S3ObjectStore(s3, bucket).get(key);
  return parsePolicyText(new TextDecoder().decode(bytes));
}

/**
 * Validates the campaign's fields (and with `inService`, checks the channel and `at` against that policy),
 * then sends it as batch messages; returns how many messages.
 */
export function pushCampaign(
  sqs: SQSClient,
  queueUrl: string,
  campaign: CampaignPush,
  inService?: PolicyInService,
): Promise<number> {
  return push(new SqsCampaignQueue(sqs, queueUrl), campaign, inService);
}

/**
 * `campaign what-if`: the campaign decided against the live caps in Redis and the policy and segments in
 * the bucket, in peek mode. Nothing is written: the engine only peeks, and the rules are read through a
 * store without a writer (no accepted-bitmap copy is kept).
 */
export async function campaignWhatIfOn(
  parts: { s3: S3Client; bucket: string; cluster: TollgateCluster; namespace: string; policyKey?: string },
  campaign: WhatIfCampaign,
  options: WhatIfOptions,
): Promise<WhatIfReport> {
  const objects = new S3ObjectStore(parts.s3, parts.bucket);
  const rules = new RulesSource({
    store: { get: (key) => objects.get(key), head: (key) => objects.head(key) },
    ...(parts.policyKey === undefined ? {} : { policyKey: parts.policyKey }),
    refreshMs: 60_000,
    clock: options.clock,
  });
  const capper = new Capper({
    store: new RedisCapStore(parts.cluster),
    rules: (request) => rules.current(request),
    namespace: parts.namespace,
    clock: options.clock,
  });
  return campaignWhatIf(capper, campaign, options);
}
