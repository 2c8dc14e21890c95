// What a rate limit is and answers: the five algorithms, their parameters and bounds, the request schemas
// of POST /v1/limit and /v1/limits (validated strictly at the boundary), and the result of one limit.
import { z } from "zod";
import { sendTimeSchema } from "../shared/send-fields.ts";

export const ALGORITHMS = ["token-bucket", "sliding-window", "sliding-log", "fixed-window", "gcra"] as const;
export type Algorithm = (typeof ALGORITHMS)[number];
/** Limits per /v1/limits request (and per script call). */
export const MAX_LIMITS = 16;
const MAX_COUNT = 1_000_000_000;
const MAX_WINDOW_MS = 365 * 86_400_000;

const positive = (max: number) =>
  z.int("expected a positive integer").min(1, "expected a positive integer").max(max, `at most ${max}`);
const key = z.string("expected a string").min(1, "must not be empty").max(256, "at most 256 characters");

const limitSchema = z.discriminatedUnion(
  "algorithm",
  [
    z.object({
      key,
      algorithm: z.literal("token-bucket"),
      max: positive(MAX_COUNT),
      refillAmount: positive(MAX_COUNT),
      refillEveryMs: positive(MAX_WINDOW_MS),
      strict: z.boolean("expected true or false").optional(),
    }),
    z.object({
      key,
      algorithm: z.literal("sliding-window"),
      max: positive(MAX_COUNT),
      windowMs: positive(MAX_WINDOW_MS),
    }),
    z.object({ key, algorithm: z.literal("sliding-log"), max: positive(100_000), windowMs: positive(MAX_WINDOW_MS) }),
    z.object({
      key,
      algorithm: z.literal("fixed-window"),
      max: positive(MAX_COUNT),
      windowMs: positive(MAX_WINDOW_MS),
    }),
    z.object({
      key,
      algorithm: z.literal("gcra"),
      burst: z.int("expected an integer").min(0, "expected 0 or more").max(MAX_COUNT),
      count: positive(MAX_COUNT),
      periodMs: positive(MAX_WINDOW_MS),
    }),
  ],
  { error: `expected algorithm to be one of ${ALGORITHMS.join(", ")}` },
);
export type LimitSpec = z.output<typeof limitSchema>;

const cost = z.int("expected an integer from 0").min(0, "expected an integer from 0").max(MAX_COUNT).optional();
const at = sendTimeSchema.optional();

export const limitRequestSchema = z.intersection(limitSchema, z.object({ cost, at }));
export const limitsRequestSchema = z.object({
  scope: key,
  limits: z
    .array(limitSchema, "expected an array of limits")
    .min(1, "at least one limit")
    .max(MAX_LIMITS, `at most ${MAX_LIMITS} limits`),
  cost,
  at,
});

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
  resetAt: number;
  retryAfterMs?: number;
}
