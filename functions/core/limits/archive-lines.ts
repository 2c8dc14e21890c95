// The decision archive's lines for the rate limits: one per `/v1/limit` check and one per limit of a
// `/v1/limits` check (its scope named), with the limit's verdict and what is left. The record schema is
// docs/archive.md's.
import type { LimitResult } from "./limit-specs.ts";

/**
 * The line of one limit's decision: the text JSON.stringify makes of the record, its members in this order.
 * Written out, not stringified from an object made per check: on every check that object and its
 * serialisation cost as much as the rest of the reply (test/unit/limits/archive-lines.test.ts holds the
 * two to the same text).
 */
export function limitLine(
  request: { key: string; algorithm: string; cost?: number; scope?: string },
  result: LimitResult,
  decidedAt: number,
  at: number,
): string {
  return (
    `{"kind":"limit","decidedAt":${number(decidedAt)},"at":${number(at)},` +
    `"scope":${request.scope === undefined ? "null" : JSON.stringify(request.scope)},` +
    `"key":${JSON.stringify(request.key)},"algorithm":${JSON.stringify(request.algorithm)},` +
    `"cost":${request.cost === undefined ? "null" : number(request.cost)},` +
    `"decision":"${result.allowed ? "allowed" : "denied"}","limit":${number(result.limit)},` +
    `"remaining":${number(result.remaining)},"retryAfterMs":${result.retryAfterMs === undefined ? "null" : number(result.retryAfterMs)}}`
  );
}

/** A number as JSON.stringify writes it: its shortest text (-0 as 0), null when not finite. */
const number = (value: number) => (Number.isFinite(value) ? String(value) : "null");
