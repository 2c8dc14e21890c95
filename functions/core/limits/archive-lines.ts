// The decision archive's lines for the rate limits: one per `/v1/limit` check and one per limit of a
// `/v1/limits` check (its scope named), with the limit's verdict and what is left. The record schema is
// docs/archive.md's.
import type { LimitResult } from "./limit-specs.ts";

export function limitLine(
  request: { key: string; algorithm: string; cost?: number; scope?: string },
  result: LimitResult,
  decidedAt: number,
  at: number,
): string {
  return JSON.stringify({
    kind: "limit",
    decidedAt,
    at,
    scope: request.scope ?? null,
    key: request.key,
    algorithm: request.algorithm,
    cost: request.cost ?? null,
    decision: result.allowed ? "allowed" : "denied",
    limit: result.limit,
    remaining: result.remaining,
    retryAfterMs: result.retryAfterMs ?? null,
  });
}
