// POST /v1/limit parses a request with its algorithm's member schema (the fast path) rather than the whole
// discriminated union: both must give the same value or the same first error, for any body.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ALGORITHMS, limitRequestSchema, limitRequestSchemaFor } from "../../functions/core/limits/limit-specs.ts";
import { ValidationError } from "../../functions/core/shared/errors.ts";
import { parseOrThrow } from "../../functions/core/shared/validation.ts";

/** The value, or the ValidationError's field and message. */
function outcome(schema: Parameters<typeof parseOrThrow>[0], body: unknown) {
  try {
    return { value: parseOrThrow(schema, body) };
  } catch (error) {
    if (!(error instanceof ValidationError)) throw error;
    return { path: error.path, message: error.message };
  }
}

/** Field values near every bound the schemas draw: good, bad, wrong type, missing. */
const number = fc.oneof(
  fc.constantFrom(-1, 0, 1, 2, 999, 1000, 1001, 1e9, 1e9 + 1, 1.5, 31_536_000_000, 31_536_000_001, 1e13, Number.NaN),
  fc.integer({ min: 0, max: 2_000_000 }),
  fc.constantFrom("5", null, true),
);
const fields = {
  key: fc.oneof(fc.string({ maxLength: 3 }), fc.constant("k".repeat(257)), fc.constant(7)),
  algorithm: fc.oneof(fc.constantFrom(...ALGORITHMS), fc.constantFrom("fixed", "__proto__", "constructor", 3)),
  max: number,
  windowMs: number,
  refillAmount: number,
  refillEveryMs: number,
  strict: fc.oneof(fc.boolean(), fc.constant("yes")),
  burst: number,
  count: number,
  periodMs: number,
  cost: number,
  at: fc.oneof(fc.constant(Date.now()), number),
  onStoreError: fc.constantFrom("allow", "deny", "fail"),
  strcit: fc.boolean(),
};
const body = fc.oneof(
  fc.record(fields, { requiredKeys: [] }),
  fc.record(fields, { requiredKeys: ["key", "algorithm"] }),
  fc.constantFrom(null, [], "body", 5),
);

describe("POST /v1/limit parsing by the algorithm's own schema", () => {
  it("gives the union's value or first error for any body", () => {
    fc.assert(
      fc.property(body, (request) => {
        expect(outcome(limitRequestSchemaFor(request), request)).toEqual(outcome(limitRequestSchema, request));
      }),
      { numRuns: 3000 },
    );
  });

  it("still names the field of a GCRA rate finer than one per microsecond (the member keeps the refinement)", () => {
    const request = { key: "k", algorithm: "gcra", burst: 1, count: 2001, periodMs: 2 };
    expect(outcome(limitRequestSchemaFor(request), request)).toEqual({
      path: "count",
      message: "count: at most periodMs × 1000 (one per microsecond)",
    });
  });
});
