// What a rate limit is and answers: the five algorithms, their parameters and bounds, the request schemas
// of POST /v1/limit and /v1/limits (strict: an unknown field is refused, naming it), and the result of one
// limit.
import { z } from "zod";
import { sendTimeSchema } from "../shared/send-fields.ts";

export const ALGORITHMS = ["token-bucket", "sliding-window", "sliding-log", "fixed-window", "gcra"] as const;
export type Algorithm = (typeof ALGORITHMS)[number];
/** Limits per /v1/limits request (and per script call). */
export const MAX_LIMITS = 16;
/** How far back `at` may go: as far as the longest window. */
export const MAX_PAST_MS = 365 * 86_400_000;
const MAX_COUNT = 1_000_000_000;
const MAX_WINDOW_MS = 365 * 86_400_000;
/** The sliding log keeps one entry per charged millisecond: its max bounds a log's length. */
const MAX_LOG = 100_000;
/** GCRA: the time a full burst takes to drain, (burst + 1) × periodMs / count, at most (as the TTLs). */
const MAX_GCRA_TOLERANCE_MS = 10 * 365 * 86_400_000;

const positive = (max: number) =>
  z.int("expected a positive integer").min(1, "expected a positive integer").max(max, `at most ${max}`);
/** The longest `key` (and scope name), in UTF-16 code units (what zod's max counts). */
export const MAX_LIMIT_NAME_LENGTH = 256;
const name = z
  .string("expected a string")
  .min(1, "must not be empty")
  .max(MAX_LIMIT_NAME_LENGTH, `at most ${MAX_LIMIT_NAME_LENGTH} characters`);
/** A limit's `key` (and a scope's name). */
export const limitNameSchema = name;
const cost = z
  .int("expected an integer from 0")
  .min(0, "expected an integer from 0")
  .max(MAX_COUNT, `at most ${MAX_COUNT}`)
  .optional();

/** Each algorithm's own fields. */
const parameters = {
  "token-bucket": {
    max: positive(MAX_COUNT),
    refillAmount: positive(MAX_COUNT),
    refillEveryMs: positive(MAX_WINDOW_MS),
    strict: z.boolean("expected true or false").optional(),
  },
  "sliding-window": { max: positive(MAX_COUNT), windowMs: positive(MAX_WINDOW_MS) },
  "sliding-log": { max: positive(MAX_LOG), windowMs: positive(MAX_WINDOW_MS) },
  "fixed-window": { max: positive(MAX_COUNT), windowMs: positive(MAX_WINDOW_MS) },
  gcra: {
    burst: z.int("expected an integer").min(0, "expected 0 or more").max(MAX_COUNT, `at most ${MAX_COUNT}`),
    count: positive(MAX_COUNT),
    periodMs: positive(MAX_WINDOW_MS),
  },
} as const;

/** GCRA's emission interval is kept in whole ns and read in us, and its tolerance must fit the TTLs. */
function checkGcra(spec: { burst: number; count: number; periodMs: number }, ctx: z.core.$RefinementCtx) {
  const { burst, count, periodMs } = spec;
  if (count > periodMs * 1000) {
    ctx.addIssue({ code: "custom", path: ["count"], message: "at most periodMs × 1000 (one per microsecond)" });
  } else if (((burst + 1) * periodMs) / count > MAX_GCRA_TOLERANCE_MS) {
    ctx.addIssue({
      code: "custom",
      path: ["burst"],
      message: "(burst + 1) × periodMs / count is at most 10 years",
    });
  }
}

/** Each algorithm's schema of one limit: key, algorithm, its parameters, plus `extra` fields; unknown fields refused. */
function limitMembers<E extends z.core.$ZodLooseShape>(extra: E) {
  return [
    z.strictObject({ key: name, algorithm: z.literal("token-bucket"), ...parameters["token-bucket"], ...extra }),
    z.strictObject({ key: name, algorithm: z.literal("sliding-window"), ...parameters["sliding-window"], ...extra }),
    z.strictObject({ key: name, algorithm: z.literal("sliding-log"), ...parameters["sliding-log"], ...extra }),
    z.strictObject({ key: name, algorithm: z.literal("fixed-window"), ...parameters["fixed-window"], ...extra }),
    z
      .strictObject({ key: name, algorithm: z.literal("gcra"), ...parameters.gcra, ...extra })
      .superRefine((spec, ctx) => checkGcra(spec as { burst: number; count: number; periodMs: number }, ctx)),
  ] as const;
}

/** One limit of any algorithm: the members above, chosen by `algorithm`. */
function limitShape<E extends z.core.$ZodLooseShape>(extra: E) {
  return z.discriminatedUnion("algorithm", [...limitMembers(extra)], {
    error: `expected algorithm to be one of ${ALGORITHMS.join(", ")}`,
  });
}

/** What the caller wants when Redis does not answer (the HTTP layer acts on it). */
const onStoreError = z.enum(["allow", "deny"], 'expected "allow" or "deny"').optional();
const at = sendTimeSchema.optional();
/** A request's `at`. */
export const requestTimeSchema = at;
const requestExtra = { cost, at, onStoreError };

/** POST /v1/limit: one limit with its cost (default 1; 0 peeks) and time. */
export const limitRequestSchema = limitShape(requestExtra);

/**
 * The member of limitRequestSchema for each algorithm. The union picks the same member by `algorithm` and
 * reports the same issues, but costs about twice as much per request: POST /v1/limit parses with the
 * member when the algorithm is known, and with the union only to word the error of an unknown one
 * (test/unit/limits/limit-request-parse.test.ts holds the two paths to the same answers).
 */
const limitRequestMembers = new Map<unknown, z.ZodType<LimitRequest>>(
  limitMembers(requestExtra).map((member) => [member.shape.algorithm.value, member as z.ZodType<LimitRequest>]),
);

/** The schema that parses `request` as POST /v1/limit: its algorithm's member, or the union. */
export function limitRequestSchemaFor(request: unknown): z.ZodType<LimitRequest> {
  const algorithm =
    typeof request === "object" && request !== null ? (request as { algorithm?: unknown }).algorithm : undefined;
  return limitRequestMembers.get(algorithm) ?? limitRequestSchema;
}

/** A limit of POST /v1/limits: its own `cost` replaces the request's. */
const scopedLimitSchema = limitShape({ cost });

/** POST /v1/limits: several limits of one scope, checked and charged all or none. */
export const limitsRequestSchema = z
  .strictObject({
    scope: name,
    limits: z
      .array(scopedLimitSchema, "expected an array of limits")
      .min(1, "at least one limit")
      .max(MAX_LIMITS, `at most ${MAX_LIMITS} limits`),
    cost,
    at,
    onStoreError,
  })
  .superRefine((request, ctx) => {
    // a key names one counter of the scope: listed twice, it would be charged twice or ambiguously
    const seen = new Map<string, number>();
    request.limits.forEach((limit, i) => {
      const first = seen.get(limit.key);
      if (first === undefined) seen.set(limit.key, i);
      else ctx.addIssue({ code: "custom", path: ["limits", i, "key"], message: `already listed as limits[${first}]` });
    });
  });

export type LimitRequest = z.output<typeof limitRequestSchema>;
export type LimitsRequest = z.output<typeof limitsRequestSchema>;
/** A limit's identity and parameters, as the scripts take them. */
export type LimitSpec = z.output<typeof scopedLimitSchema>;

/** The most a single request can ever be allowed to cost: asking for more is a client error. */
export function capacity(spec: LimitSpec): number {
  return spec.algorithm === "gcra" ? spec.burst + 1 : spec.max;
}

export interface LimitResult {
  /** This limit's own verdict; in /v1/limits the request is allowed only when every limit allows. */
  allowed: boolean;
  limit: number;
  /** What is left after this request (on a denial: what is left now). */
  remaining: number;
  /** When the limit has all its capacity back (never before now + retryAfterMs). */
  resetAt: number;
  /** On a denial: how long until the same request can be allowed, nothing else happening (ms, >= 1). */
  retryAfterMs?: number;
}
