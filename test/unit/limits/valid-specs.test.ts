// A remembered spec answers a request only when its key and `at` pass validation: the lookup's shortcut for
// the usual key must accept exactly what limitNameSchema accepts, and the lookup what full validation gives.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { limitNameSchema } from "../../../functions/core/limits/limit-specs.ts";
import { isLimitName, ValidSpecs } from "../../../functions/core/limits/valid-specs.ts";

describe("isLimitName", () => {
  it("accepts exactly what limitNameSchema accepts, around the length bounds and for other types", () => {
    const values = fc.oneof(
      fc.string({ unit: "binary", minLength: 0, maxLength: 300 }),
      fc.integer({ min: 0, max: 300 }).map((length) => "k".repeat(length)),
      fc.anything(),
    );
    fc.assert(
      fc.property(values, (value) => {
        expect(isLimitName(value)).toBe(limitNameSchema.safeParse(value).success);
      }),
      { numRuns: 3_000 },
    );
  });
});

describe("ValidSpecs.lookup", () => {
  const spec = { algorithm: "fixed-window" as const, max: 10, windowMs: 1_000 };
  const remembered = () => {
    const specs = new ValidSpecs();
    specs.remember({ key: "a", ...spec }, { key: "a", ...spec });
    return specs;
  };

  it("answers a remembered spec with the request's own key and at", () => {
    expect(remembered().lookup({ key: "b", ...spec, at: 5 })).toEqual({ key: "b", ...spec, at: 5 });
    expect(remembered().lookup({ key: "b".repeat(256), ...spec })).toEqual({ key: "b".repeat(256), ...spec });
  });

  it("leaves to full validation a key or at that does not pass", () => {
    for (const key of ["", "b".repeat(257), 7, undefined, null, ["b"]])
      expect(remembered().lookup({ key, ...spec })).toBeUndefined();
    for (const at of [-1, 1.5, "5", null]) expect(remembered().lookup({ key: "b", ...spec, at })).toBeUndefined();
  });
});
