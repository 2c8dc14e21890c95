// POST /v1/limit parses a request with its algorithm's member schema (the fast path) rather than the whole
// discriminated union, and a Limiter that validated a request's other fields before checks only its key and
// `at`: each must give the same value or the same first error as the union, for any body.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ALGORITHMS, limitRequestSchema, limitRequestSchemaFor } from "../../../functions/core/limits/limit-specs.ts";
import { Limiter } from "../../../functions/core/limits/limiter.ts";
import { ValidationError } from "../../../functions/core/shared/errors.ts";
import { parseOrThrow } from "../../../functions/core/shared/validation.ts";

/** The value, or the ValidationError's field and message. */
function outcome(schema: Parameters<typeof parseOrThrow>[0], body: unknown) {
  try {
    return { value: parseOrThrow(schema, body) };
  } catch (error) {
    if (!(error instanceof ValidationError)) throw error;
    return { path: error.path, message: error.message };
  }
}

/** What Limiter.validate answers: the value, or the ValidationError's field and message. */
function validated(limiter: Limiter, body: unknown) {
  try {
    return { value: limiter.validate(body) };
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
/** Specs that pass, one per algorithm, some with a cost (within capacity or not) or onStoreError. */
const validSpec = fc
  .tuple(
    fc.constantFrom<Record<string, unknown>>(
      { algorithm: "token-bucket", max: 10, refillAmount: 1, refillEveryMs: 1000, strict: true },
      { algorithm: "sliding-window", max: 10, windowMs: 1000 },
      { algorithm: "sliding-log", max: 10, windowMs: 1000 },
      { algorithm: "fixed-window", max: 10, windowMs: 1000 },
      { algorithm: "gcra", burst: 9, count: 10, periodMs: 1000 },
    ),
    fc.option(fc.constantFrom(0, 1, 10, 11), { nil: undefined }),
    fc.option(fc.constantFrom("allow", "deny"), { nil: undefined }),
  )
  .map(([spec, cost, onStoreError]) => ({
    ...spec,
    ...(cost === undefined ? {} : { cost }),
    ...(onStoreError === undefined ? {} : { onStoreError }),
  }));
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

  it("gives the same value or first error from remembered specs as a Limiter that never saw one", () => {
    // a few specs (valid or not) sent again and again with other keys, times and field orders
    const variant = fc.record({
      key: fields.key,
      at: fc.option(fields.at, { nil: undefined }),
      reversed: fc.boolean(),
      inherited: fc.boolean(),
    });
    fc.assert(
      fc.property(
        fc.array(fc.oneof(validSpec, fc.record(fields, { requiredKeys: ["algorithm"] })), {
          minLength: 1,
          maxLength: 4,
        }),
        fc.array(fc.tuple(fc.nat(), variant), { minLength: 1, maxLength: 30 }),
        (specs, sends) => {
          const warm = new Limiter({ store: {} as never });
          for (const [pick, { key, at, reversed, inherited }] of sends) {
            const { key: _key, at: _at, ...spec } = specs[pick % specs.length] as Record<string, unknown>;
            const entries = Object.entries({ ...spec, key, ...(at === undefined ? {} : { at }) });
            const own = Object.fromEntries(reversed ? entries.reverse() : entries);
            // an inherited field counts as zod counts it
            const body = inherited ? Object.assign(Object.create({ cost: 1 }), own) : own;
            expect(validated(warm, body)).toEqual(validated(new Limiter({ store: {} as never }), body));
          }
        },
      ),
      { numRuns: 400 },
    );
  });

  it("does not take a remembered spec for a request with another field, value or type", () => {
    const limiter = new Limiter({ store: {} as never });
    const spec = { algorithm: "fixed-window", max: 5, windowMs: 1000 };
    expect(limiter.validate({ ...spec, key: "a" })).toEqual({ ...spec, key: "a" });
    expect(() => limiter.validate({ ...spec, key: "b", strcit: true })).toThrow("strcit: unknown field");
    expect(() => limiter.validate({ ...spec, key: "b", max: "5" })).toThrow("max: expected a positive integer");
    expect(() => limiter.validate({ ...spec, key: "" })).toThrow("key: must not be empty");
    expect(() => limiter.validate({ ...spec, key: "b", at: -1 })).toThrow("at: expected ms since the epoch");
    expect(limiter.validate({ ...spec, key: "b", max: 6 })).toEqual({ ...spec, key: "b", max: 6 });
    expect(limiter.validate({ ...spec, key: "c", at: 5 })).toEqual({ ...spec, key: "c", at: 5 });
  });
});
