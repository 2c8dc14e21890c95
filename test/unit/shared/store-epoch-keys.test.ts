// The store epoch's keys: each of the 16,384 slots has one, in that slot, so a script of any key can declare
// the epoch key of its own slot (checked against the slot function ioredis routes by).
import calculateSlot from "cluster-key-slot";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  HASH_SLOTS,
  hashSlotOf,
  isStoreEpochKey,
  limitKey,
  storeEpochKey,
  storeEpochKeyFor,
  storeEpochKeys,
} from "../../../sdk/src/protocol/index.ts";

describe("store epoch keys", () => {
  it("name one key per hash slot, <ns>:se:{<tag>}, each in its own slot", () => {
    const keys = storeEpochKeys("tg");
    expect(keys).toHaveLength(HASH_SLOTS);
    expect(new Set(keys).size).toBe(HASH_SLOTS);
    keys.forEach((key, slot) => {
      expect(key).toMatch(/^tg:se:\{[0-9a-z]+\}$/);
      expect(calculateSlot(key)).toBe(slot);
    });
  });

  it("are told apart from the state keys beside them", () => {
    expect(storeEpochKeys("p1-5").every(isStoreEpochKey)).toBe(true);
    for (const key of ["p1-5:cap:{b3}:u:7", "p1-5:cap:{b3}:ids", limitKey("tg:t:team-a", "gcra", "se:{x}")])
      expect(isStoreEpochKey(key), key).toBe(false);
  });

  // cluster-key-slot takes "{}{a}" by its second tag, where Redis (keyHashSlot) hashes the whole key; no
  // Tollgate key has an empty tag (encodeName), so keys whose first "{" closes at once are left out here
  it("find a key's slot as Redis Cluster does: hash tags, braces and UTF-8 included", () => {
    fc.assert(
      fc.property(fc.string({ unit: fc.constantFrom("a", "{", "}", "é", "😀", "1", ":") }), (key) => {
        fc.pre(key.indexOf("{") === -1 || key[key.indexOf("{") + 1] !== "}");
        expect(hashSlotOf(key)).toBe(calculateSlot(key));
      }),
      { numRuns: 2_000 },
    );
  });

  // ASCII keys take a path of their own (hashed from the string, no buffer): the same slots
  it("find an ASCII key's slot as Redis Cluster does, printable and control characters alike", () => {
    fc.assert(
      fc.property(fc.string({ unit: fc.integer({ min: 0, max: 0x7f }).map((c) => String.fromCharCode(c)) }), (key) => {
        fc.pre(key.indexOf("{") === -1 || key[key.indexOf("{") + 1] !== "}");
        expect(hashSlotOf(key)).toBe(calculateSlot(key));
      }),
      { numRuns: 2_000 },
    );
    expect(hashSlotOf("tg:l:fw:{user-1}:x")).toBe(calculateSlot("tg:l:fw:{user-1}:x"));
  });

  // only the hashed text is scanned for characters past ASCII: around an ASCII tag they change nothing
  it("find the slot of an ASCII tag among other characters, and of a tag that has them", () => {
    for (const key of ["ünï:{user-1}:é", "😀{a}😀", "{é}a", "a{b}{é}", "é{a", "}é{x}"])
      expect(hashSlotOf(key)).toBe(calculateSlot(key));
  });

  it("give a rate-limit key the epoch key of its slot, whatever its tag", () => {
    for (const key of ["login:1.2.3.4", "{odd}", "ünïcode", ""]) {
      const state = limitKey("tg:t:team-a", "gcra", key);
      expect(calculateSlot(storeEpochKeyFor("tg", state))).toBe(calculateSlot(state));
    }
    expect(storeEpochKeyFor("tg", storeEpochKey("tg", 42))).toBe(storeEpochKey("tg", 42));
  });
});
