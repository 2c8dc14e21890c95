// The rate-limit keys: whatever the scope and key text, one hash slot per scope, and two different
// (scope, key) pairs, or a /v1/limit key and a /v1/limits scope, never share a Redis key.
import calculateSlot from "cluster-key-slot";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ALGORITHMS } from "../../functions/core/limits/limit-specs.ts";
import { limitKey, scopedLimitKey } from "../../functions/core/shared/keys.ts";

/** The hash tag Redis Cluster hashes: between the first "{" and the first "}" after it, when not empty. */
function hashTag(key: string): string {
  const open = key.indexOf("{");
  const close = key.indexOf("}", open + 1);
  return open >= 0 && close > open + 1 ? key.slice(open + 1, close) : key;
}

const text = fc.string({
  unit: fc.constantFrom("{", "}", "%", ":", "a", "b", "7", "B", "D"),
  minLength: 1,
  maxLength: 12,
});
const algorithm = fc.constantFrom(...ALGORITHMS);

describe("rate-limit keys", () => {
  it("keep every limit of a scope in the scope's slot, whatever braces the texts hold", () => {
    fc.assert(
      fc.property(text, text, text, algorithm, algorithm, (scope, a, b, one, two) => {
        const first = scopedLimitKey("tg", scope, one, a);
        const second = scopedLimitKey("tg", scope, two, b);
        expect(hashTag(first)).toBe(hashTag(second));
        expect(calculateSlot(first)).toBe(calculateSlot(second));
      }),
    );
  });

  it("never give two different (scope, algorithm, key) the same key", () => {
    fc.assert(
      fc.property(text, text, algorithm, text, text, algorithm, (s1, k1, a1, s2, k2, a2) => {
        fc.pre(s1 !== s2 || k1 !== k2 || a1 !== a2);
        expect(scopedLimitKey("tg", s1, a1, k1)).not.toBe(scopedLimitKey("tg", s2, a2, k2));
      }),
    );
  });

  it("keep /v1/limit keys apart from /v1/limits keys", () => {
    fc.assert(
      fc.property(text, text, algorithm, algorithm, (key, scope, one, two) => {
        const single = limitKey("tg", one, key);
        expect(single).not.toBe(scopedLimitKey("tg", scope, two, key));
        expect(single).not.toBe(scopedLimitKey("tg", key, two, key));
      }),
    );
  });

  it("the issue's collisions are apart: scope x + key `y}:fixed-window:z` and scope `x}:fixed-window:y` + key z", () => {
    const one = scopedLimitKey("tg", "x", "fixed-window", "y}:fixed-window:z");
    const two = scopedLimitKey("tg", "x}:fixed-window:y", "fixed-window", "z");
    expect(one).not.toBe(two);
    expect(hashTag(one)).toBe("x");
    expect(hashTag(scopedLimitKey("tg", "}", "gcra", "k"))).toBe("%7D");
    expect(limitKey("tg", "gcra", "k")).not.toBe(scopedLimitKey("tg", "k", "gcra", "k"));
  });
});
