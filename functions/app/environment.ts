// The environment contract of the Tollgate functions, in one place: the schemas the functions parse once,
// at cold start (a bad value names the variable), and the variable types that infra/functions.ts and
// scripts/local-stack.ts set them through, so a renamed variable fails the typecheck, not a cold start.
import { z } from "zod";
import {
  DEFAULT_NAMESPACE,
  MAX_KEY_NAMESPACE_LENGTH,
  MAX_NAMESPACE_LENGTH,
  NAME_PATTERN,
  NAME_RULE,
} from "../../sdk/src/protocol/index.ts";
import { SQS_MAX_MESSAGE_BYTES } from "../adapters/sqs-sinks.ts";
import { DEFAULT_DELIVERY_BATCH_SIZE } from "../core/capping/delivery.ts";
import { DEFAULT_POLICY_KEY, DEFAULT_REDELIVERY_MS } from "../core/capping/policy.ts";
import { parseOrThrow } from "../core/shared/validation.ts";
import { CHECK_API_ROUTES } from "../handlers/function-urls.ts";

const integer = (min: number, max: number, fallback: number) =>
  z
    .string()
    .default(String(fallback))
    .refine(
      (text) => /^[0-9]+$/.test(text) && Number(text) >= min && Number(text) <= max,
      `expected an integer from ${min} to ${max}`,
    )
    .transform(Number);

const flag = (fallback: "true" | "false") =>
  z
    .enum(["true", "false", "1", "0", ""], 'expected "true" or "false"')
    .default(fallback)
    .transform((text) => text === "true" || text === "1");

const hostPort = /^[A-Za-z0-9.-]+:[0-9]{1,5}$/;
// Not z.url(): queue URLs of local emulators have hosts like sqs.us-east-1.127.0.0.1, which it refuses.
const httpUrl = (required: string) =>
  z.string(required).regex(/^https?:\/\/[^\s/]+(\/\S*)?$/, "expected an http(s) URL");

export type DecisionArchiveTarget =
  | { kind: "off" }
  | { kind: "firehose"; streamName: string }
  | { kind: "s3"; bucket: string; prefix: string };

/** What every Tollgate function reads: Redis, the rules bucket, the key namespace, AWS. */
const commonEnvironment = {
  REDIS_NODES: z
    .string('required: the Redis configuration endpoint or nodes, "host:port[,host:port...]"')
    .refine(
      (text) => text.split(",").every((node) => hostPort.test(node.trim())),
      'expected "host:port[,host:port...]"',
    )
    .transform((text) =>
      text.split(",").map((node) => {
        const [host, port] = node.trim().split(":");
        return { host: host as string, port: Number(port) };
      }),
    ),
  REDIS_TLS: flag("false"),
  REDIS_USERNAME: z.string().optional(),
  /** Set in memory from REDIS_AUTH_SECRET_ARN by the Lambda entries; locally, a plain variable. */
  REDIS_PASSWORD: z.string().optional(),
  REDIS_AUTH_SECRET_ARN: z
    .string()
    .regex(/^arn:aws[a-z-]*:secretsmanager:/, "expected a Secrets Manager ARN")
    .optional(),
  CONFIG_BUCKET: z.string("required: the bucket holding the policy and segment bitmaps").min(1, "must not be empty"),
  POLICY_KEY: z.string().min(1).default(DEFAULT_POLICY_KEY),
  REFRESH_SECONDS: integer(0, 86_400, 60),
  /** A new bitmap that takes away more than this share of its segment is refused unless forced. */
  SEGMENT_MAX_SHRINK_PERCENT: integer(0, 100, 50),
  /** Short enough that a tenant's `<KEY_NAMESPACE>:t:<tenant>` can still be a key namespace (docs/tenants.md). */
  KEY_NAMESPACE: z
    .string()
    .regex(NAME_PATTERN, NAME_RULE)
    .max(
      MAX_KEY_NAMESPACE_LENGTH,
      `at most ${MAX_KEY_NAMESPACE_LENGTH} characters: a tenant's keys start with <KEY_NAMESPACE>:t:<tenant>, at most ${MAX_NAMESPACE_LENGTH}`,
    )
    .default(DEFAULT_NAMESPACE),
  /**
   * How long a campaign message can come back by itself after a send was counted (the campaign queue's
   * visibility timeout × maxReceiveCount): named sends are kept that long to recognise the redelivery.
   * Up to 14 days (the longest SQS retention).
   */
  CAMPAIGN_REDELIVERY_SECONDS: integer(0, 14 * 86_400, DEFAULT_REDELIVERY_MS / 1000),
  /**
   * "on": a user's record reaching 1,024 sends is written in chunks (format 3), so its checks stop rewriting
   * every send it keeps. Functions of a release before it misread such records: turn it on once none runs.
   */
  CAP_HOT_RECORDS: z.enum(["on", "off"], 'expected "on" or "off"').default("off"),
  /**
   * "on": page blocks store their users' class numbers at the narrowest width (format 6), about half the
   * memory of a page whose held users kept their history. Functions of a release before it refuse such blocks:
   * turn it on once none runs.
   */
  CAP_COMPACT_CLASSES: z.enum(["on", "off"], 'expected "on" or "off"').default("off"),
  /**
   * Where every decision is archived: `firehose:<delivery stream>` (AWS), `s3://<bucket>/<prefix>/` (the
   * same objects written directly: the local stack), or "" (no archive).
   */
  DECISION_ARCHIVE: z
    .string()
    .default("")
    .refine(
      (text) =>
        text === "" || /^firehose:[A-Za-z0-9_.-]{1,64}$/.test(text) || /^s3:\/\/[a-z0-9.-]{3,63}\/(\S+\/)?$/.test(text),
      'expected "firehose:<stream>", "s3://<bucket>/<prefix>/" or ""',
    )
    .transform((text): DecisionArchiveTarget => {
      if (text === "") return { kind: "off" };
      if (text.startsWith("firehose:")) return { kind: "firehose", streamName: text.slice("firehose:".length) };
      const [bucket, ...rest] = text.slice("s3://".length).split("/");
      return { kind: "s3", bucket: bucket as string, prefix: rest.join("/") };
    }),
  /** The archive's buffer: past this many MiB held, decisions are not archived (and counted as lost). */
  ARCHIVE_BUFFER_MIB: integer(1, 1_024, 64),
  AWS_REGION: z.string().min(1).default("us-east-1"),
  AWS_ENDPOINT_URL: httpUrl("expected an http(s) URL").optional(),
};

export const consumerEnvironmentSchema = z
  .object({
    ...commonEnvironment,
    REDIS_DEADLINE_MS: integer(100, 60_000, 6_000),
    DELIVERY_QUEUE_URL: httpUrl("required: the delivery queue URL"),
    DEAD_LETTER_QUEUE_URL: httpUrl("required: the campaign queue's dead-letter queue URL"),
    DELIVERY_BATCH_SIZE: integer(1, 1_000, DEFAULT_DELIVERY_BATCH_SIZE),
    /** The delivery queue's MaximumMessageSize: delivery messages are split to fit it. */
    DELIVERY_MAX_MESSAGE_BYTES: integer(1_024, SQS_MAX_MESSAGE_BYTES, SQS_MAX_MESSAGE_BYTES),
    /** The campaign queue's redrive maxReceiveCount: a record failing on that receive is dead-lettered with its reason. */
    CAMPAIGN_MAX_RECEIVE_COUNT: integer(1, 1_000, 5),
    TIME_BUDGET_MARGIN_MS: integer(0, 900_000, 15_000),
    /** Records of an invocation decided at once (one clock reading each wave, shared script calls). */
    RECORDS_IN_FLIGHT: integer(1, 100, 10),
    /**
     * Where deferred sends wait (docs/quiet-hours.md): "aws" (the campaign queue's delays up to 15 minutes,
     * EventBridge Scheduler beyond: the DEFERRAL_* variables below), "s3://<bucket>/<prefix>/" (the local
     * stack's scheduler) or "" (none: a batch that defers fails and is retried, then dead-lettered).
     */
    DEFERRALS: z
      .string()
      .default("")
      .refine(
        (text) => text === "" || text === "aws" || /^s3:\/\/[a-z0-9.-]{3,63}\/(\S+\/)?$/.test(text),
        'expected "aws", "s3://<bucket>/<prefix>/" or ""',
      ),
    /** With DEFERRALS=aws: the campaign queue (URL for delays, ARN for schedules), the group, role and DLQ. */
    CAMPAIGN_QUEUE_URL: httpUrl("expected the campaign queue URL").optional(),
    CAMPAIGN_QUEUE_ARN: z
      .string()
      .regex(/^arn:aws[a-z-]*:sqs:/, "expected an SQS queue ARN")
      .optional(),
    DEFERRAL_SCHEDULE_GROUP: z.string().min(1).max(64).optional(),
    DEFERRAL_ROLE_ARN: z
      .string()
      .regex(/^arn:aws[a-z-]*:iam::/, "expected an IAM role ARN")
      .optional(),
    DEFERRAL_DLQ_ARN: z
      .string()
      .regex(/^arn:aws[a-z-]*:sqs:/, "expected an SQS queue ARN")
      .optional(),
  })
  .superRefine((env, ctx) => {
    if (env.DEFERRALS !== "aws") return;
    for (const name of [
      "CAMPAIGN_QUEUE_URL",
      "CAMPAIGN_QUEUE_ARN",
      "DEFERRAL_SCHEDULE_GROUP",
      "DEFERRAL_ROLE_ARN",
      "DEFERRAL_DLQ_ARN",
    ] as const) {
      if (env[name] === undefined)
        ctx.addIssue({ code: "custom", path: [name], message: "required with DEFERRALS=aws" });
    }
  });

export const checkApiEnvironmentSchema = z.object({
  ...commonEnvironment,
  /** Per request: a slow store never holds a caller longer. */
  CHECK_TIMEOUT_MS: integer(5, 10_000, 50),
  /**
   * `POST /v1/quotas/sync`: how long a sync waits for Redis. Off the callers' request path (the SDK waits
   * at most its `waitMs`, 500 ms by default, for a sync), and a 503 puts the SDK in degraded mode, where
   * strict spends only the tokens it holds: a late answer serves better than none.
   */
  QUOTA_SYNC_TIMEOUT_MS: integer(5, 10_000, 250),
  /** Answer keys known to be denied until they may pass again, without a Redis call. */
  NEGATIVE_CACHE: flag("true"),
  /**
   * Several invocations at once in one execution environment (the stack's `checkApiCompute` =
   * `managed-instances` sets it to the environment's concurrency): POST /v1/limit checks of one hash slot
   * made in one turn of the event loop, or arriving while a call to that slot is in flight, share a call
   * (slot-batcher.ts), at most this many a call. 0 (the
   * default, one invocation per environment): every check its own call.
   */
  CHECK_SLOT_BATCH: integer(0, 1_600, 0),
  /** `quota-sync`: serve `POST /v1/quotas/sync` alone (the stack's QuotaSync function: function-urls.ts). */
  CHECK_API_ROUTES: z.enum(CHECK_API_ROUTES, `expected one of ${CHECK_API_ROUTES.join(", ")}`).default("all"),
});

/** What one rotated secret is on the cache: the replication group's AUTH token, or an RBAC user's password. */
const rotationTarget = z.discriminatedUnion("kind", [
  z.strictObject({ kind: z.literal("auth-token"), replicationGroupId: z.string().min(1) }),
  z.strictObject({ kind: z.literal("user"), userId: z.string().min(1), userName: z.string().min(1) }),
]);

export const rotationEnvironmentSchema = z.object({
  REDIS_NODES: commonEnvironment.REDIS_NODES,
  REDIS_TLS: commonEnvironment.REDIS_TLS,
  /** JSON: secret ARN -> its target on the cache (infra/cache-rotation.ts writes it). */
  CACHE_ROTATION_TARGETS: z
    .string("required: the JSON object of secret ARN -> rotation target")
    .transform((text, ctx) => {
      try {
        return JSON.parse(text) as unknown;
      } catch {
        ctx.addIssue({ code: "custom", message: "expected JSON" });
        return z.NEVER;
      }
    })
    .pipe(
      z.record(z.string().regex(/^arn:aws[a-z-]*:secretsmanager:/, "expected a Secrets Manager ARN"), rotationTarget),
    ),
  /** How long a step waits for ElastiCache to apply a change (the function's timeout is longer). */
  ROTATION_WAIT_SECONDS: integer(10, 840, 600),
  AWS_REGION: commonEnvironment.AWS_REGION,
  AWS_ENDPOINT_URL: commonEnvironment.AWS_ENDPOINT_URL,
});
export type RotationVariables = z.input<typeof rotationEnvironmentSchema>;
export type RotationEnvironment = z.output<typeof rotationEnvironmentSchema>;

export function parseRotationEnvironment(env: NodeJS.ProcessEnv): RotationEnvironment {
  return parseOrThrow(rotationEnvironmentSchema, env);
}

/** The variables a deployment sets (every value a string, as Lambda stores them); omitted ones default. */
export type CommonVariables = z.input<z.ZodObject<typeof commonEnvironment>>;
export type ConsumerVariables = z.input<typeof consumerEnvironmentSchema>;
export type CheckApiVariables = z.input<typeof checkApiEnvironmentSchema>;

export type CommonEnvironment = z.output<z.ZodObject<typeof commonEnvironment>>;
export type ConsumerEnvironment = z.output<typeof consumerEnvironmentSchema>;
export type CheckApiEnvironment = z.output<typeof checkApiEnvironmentSchema>;

export function parseConsumerEnvironment(env: NodeJS.ProcessEnv): ConsumerEnvironment {
  return parseOrThrow(consumerEnvironmentSchema, env);
}

export function parseCheckApiEnvironment(env: NodeJS.ProcessEnv): CheckApiEnvironment {
  return parseOrThrow(checkApiEnvironmentSchema, env);
}
