// The archive line of a rate-limit decision is written out by hand for speed: it must be the text
// JSON.stringify makes of docs/archive.md's record, member for member, for any key, scope and figures.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { limitLine } from "../../../functions/core/limits/archive-lines.ts";
import { ALGORITHMS, type LimitResult } from "../../../functions/core/limits/limit-specs.ts";

/** The record as docs/archive.md defines it, stringified: what the line must equal. */
const record = (
  request: { key: string; algorithm: string; cost?: number; scope?: string },
  result: LimitResult,
  decidedAt: number,
  at: number,
) =>
  JSON.stringify({
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

// any double, -0, NaN and the infinities included: JSON writes the last three as null and -0 as 0
const anyNumber = fc.oneof(fc.integer(), fc.double(), fc.constantFrom(-0, Number.NaN, Number.POSITIVE_INFINITY));

describe("limitLine", () => {
  it("is the record's JSON for any key, scope, cost and result", () => {
    fc.assert(
      fc.property(
        fc.record(
          {
            // full Unicode, quotes, backslashes, control characters and lone surrogates
            key: fc.string({ unit: "binary", maxLength: 40 }),
            algorithm: fc.constantFrom(...ALGORITHMS),
            cost: anyNumber,
            scope: fc.string({ unit: "binary", maxLength: 20 }),
          },
          { requiredKeys: ["key", "algorithm"] },
        ),
        fc.record(
          {
            allowed: fc.boolean(),
            limit: anyNumber,
            remaining: anyNumber,
            resetAt: anyNumber,
            retryAfterMs: anyNumber,
          },
          { requiredKeys: ["allowed", "limit", "remaining", "resetAt"] },
        ),
        anyNumber,
        anyNumber,
        (request, result, decidedAt, at) => {
          expect(limitLine(request, result, decidedAt, at)).toBe(record(request, result, decidedAt, at));
        },
      ),
      { numRuns: 2_000 },
    );
  });

  it("reads back as the record of a denial with its scope", () => {
    const line = limitLine(
      { key: 'user "7"\\', algorithm: "gcra", cost: 2, scope: "api" },
      { allowed: false, limit: 10, remaining: 0, resetAt: 5, retryAfterMs: 1_500 },
      1_000,
      900,
    );
    expect(JSON.parse(line)).toEqual({
      kind: "limit",
      decidedAt: 1_000,
      at: 900,
      scope: "api",
      key: 'user "7"\\',
      algorithm: "gcra",
      cost: 2,
      decision: "denied",
      limit: 10,
      remaining: 0,
      retryAfterMs: 1_500,
    });
  });
});
