// The rate-limit keys: whatever the scope and key text, one hash slot per scope, and two different
// (scope, key) pairs, or a /v1/limit key and a /v1/limits scope, never share a Redis key.
import calculateSlot from "cluster-key-slot";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ALGORITHMS } from "../../../functions/core/limits/limit-specs.ts";
import { limitKey, scopedLimitKey } from "../../../sdk/src/protocol/index.ts";

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

  // Redis sees the key as ioredis writes it, UTF-8, where every lone surrogate becomes U+FFFD
  const wire = (key: string) => Buffer.from(key, "utf8").toString("hex");
  const surrogates = fc.string({
    unit: fc.constantFrom(
      "\ud800",
      "\udbff",
      "\udc00",
      "\udfff",
      "\ud83d",
      "\ude00",
      "\ufffd",
      "%",
      "u",
      "D",
      "8",
      "{",
    ),
    minLength: 1,
    maxLength: 8,
  });

  it("never give two different texts the same bytes on the wire, lone surrogates included", () => {
    fc.assert(
      fc.property(surrogates, surrogates, surrogates, surrogates, (s1, k1, s2, k2) => {
        fc.pre(s1 !== s2 || k1 !== k2);
        expect(wire(scopedLimitKey("tg", s1, "gcra", k1))).not.toBe(wire(scopedLimitKey("tg", s2, "gcra", k2)));
        if (k1 !== k2) expect(wire(limitKey("tg", "gcra", k1))).not.toBe(wire(limitKey("tg", "gcra", k2)));
      }),
    );
  });

  it("keys that differ only in lone surrogates are apart; a surrogate pair is kept as it is", () => {
    const keys = [0xd800, 0xdc00, 0xdbff, 0xfffd].map((unit) => limitKey("tg", "gcra", String.fromCharCode(unit)));
    expect(new Set(keys.map(wire)).size).toBe(4);
    expect(keys[0]).toBe("tg:rl:{%uD800}:gcra");
    expect(limitKey("tg", "gcra", "a\ud83d\ude00b")).toBe("tg:rl:{a\ud83d\ude00b}:gcra");
  });
});
