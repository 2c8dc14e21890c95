// The Quotas wire protocol (sdk/src/protocol/wire.ts) without Redis: keys stay in their slot, rules round-trip,
// replies decode to typed assignments and malformed ones are refused with the field named.
import calculateSlot from "cluster-key-slot";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  decodeRule,
  decodeSync,
  encodeRule,
  encodeSync,
  PROTOCOL,
  packEntry,
  type QuotaRule,
  quotaKey,
  quotaKeyProblem,
  type SyncEntry,
  type SyncRequest,
  slotGroupOf,
  WireError,
} from "../../../sdk/src/protocol/index.ts";

const rule: QuotaRule = {
  mode: "strict",
  leaseMs: 50,
  fallback: "share",
  slotGroups: 4,
  limits: [
    { windowMs: 1000, max: 1000 },
    { windowMs: 5000, max: 4000 },
  ],
};

function request(keys: string[]): SyncRequest {
  return {
    instanceId: "i-1",
    rule: "api",
    group: 2,
    seq: 7,
    configVersion: "",
    entries: keys.map((key) => ({ key, usage: [[1000, 3]], refunds: [], offered: 3, want: 5 })),
  };
}

describe("quota wire protocol", () => {
  it("keeps every key of a call in the slot of its group, whatever the key text", () => {
    fc.assert(
      fc.property(fc.array(fc.string({ minLength: 1, maxLength: 40 }), { minLength: 1, maxLength: 8 }), (texts) => {
        const { keys } = encodeSync("tg", request(texts), 1000);
        expect(new Set(keys.map((key) => calculateSlot(key))).size).toBe(1);
        expect(new Set(keys).size).toBe(3 + new Set(texts).size);
      }),
      { numRuns: 200 },
    );
  });

  it("refuses quota keys that UTF-8 could not tell apart: lone surrogates, named as the key", () => {
    expect(quotaKeyProblem("\ud800")).toBe("expected no lone UTF-16 surrogate");
    expect(quotaKeyProblem("\udc00")).toBe("expected no lone UTF-16 surrogate");
    expect(quotaKeyProblem("\ud83d\ude00")).toBeUndefined();
    expect(() => quotaKey("p", "\ud800")).toThrow("key: expected no lone UTF-16 surrogate");
  });

  it("refuses rule names and instance ids that could leave the hash tag", () => {
    expect(() => encodeSync("tg", { ...request(["a"]), rule: "a}{b" }, 0)).toThrow(WireError);
    expect(() => encodeSync("tg", { ...request(["a"]), instanceId: "x{" }, 0)).toThrow(/instanceId/);
  });

  it("spreads keys over the rule's slot groups, the same way every time", () => {
    const groups = new Set(Array.from({ length: 200 }, (_, i) => slotGroupOf(`tenant-${i}`, 8)));
    expect(groups.size).toBe(8);
    expect(slotGroupOf("tenant-1", 8)).toBe(slotGroupOf("tenant-1", 8));
    expect(slotGroupOf("anything", 1)).toBe(0);
  });

  it("round-trips a rule through its stored form", () => {
    expect(decodeRule(encodeRule(rule))).toEqual(rule);
    expect(() => decodeRule("strict|50|share|1|")).toThrow(WireError);
    expect(() => decodeRule("lenient|50|share|1|1000:5")).toThrow(/rule.mode/);
  });

  it("decodes a strict reply into typed assignments", () => {
    const reply = [PROTOCOL, "applied", 1000, "v2", encodeRule(rule), "strict", 2, 3, 5, 1050, 0, 2000, 12, 40];
    expect(decodeSync(reply, request(["k"]))).toEqual({
      status: "applied",
      serverTime: 1000,
      configVersion: "v2",
      rule,
      instances: 3,
      entries: [
        { key: "k", mode: "strict", tokens: 5, leaseExpiresAt: 1050, denyUntil: 0, resetAt: 2000, used: [12, 40] },
      ],
    });
  });

  it("refuses a reply of the wrong length, naming it", () => {
    const reply = [PROTOCOL, "applied", 1000, "v2", "", "approximate", 2, 3, 5, 1050, 0, 2000, 12];
    expect(() => decodeSync(reply, request(["k"]))).toThrow(/reply: wrong length/);
    expect(() => decodeSync([PROTOCOL, "odd", 0, "", "", "", 0, 0], request(["k"]))).toThrow(/reply.status/);
  });

  it("packs each key's numbers as little-endian doubles, one argument per key, in the order the script reads", () => {
    const entry = { key: "k", usage: [[1_764_000_000_123, 3]], refunds: [[1_764_000_000_050, 2]], offered: 9, want: 4 };
    const packed = packEntry(entry as SyncEntry, 0);
    const doubles = Array.from({ length: packed.length / 8 }, (_, i) => packed.readDoubleLE(8 * i));
    expect(doubles).toEqual([9, 4, 1, 1, 1_764_000_000_123, 3, 1_764_000_000_050, 2]);
    const { args } = encodeSync("tg", request(["a", "b"]), 1000);
    expect(args.slice(0, 5)).toEqual([PROTOCOL, 1000, "i-1", 7, ""]);
    expect(args.length).toBe(5 + 2);
  });

  it("packs strict spend ages after the refunds, one per usage pair, and none when all are 0 (today's length)", () => {
    const entry: SyncEntry = {
      key: "k",
      usage: [
        [1_000, 3],
        [1_000, 2],
      ],
      refunds: [[950, 1]],
      offered: 5,
      want: 4,
      spentAgo: [30, 0],
    };
    const packed = packEntry(entry, 0);
    const doubles = Array.from({ length: packed.length / 8 }, (_, i) => packed.readDoubleLE(8 * i));
    expect(doubles).toEqual([5, 4, 2, 1, 1_000, 3, 1_000, 2, 950, 1, 30, 0]);
    expect(packEntry({ ...entry, spentAgo: [0, 0] }, 0).length).toBe(32 + 16 * 3);
    expect(() => packEntry({ ...entry, spentAgo: [1] }, 2)).toThrow("entries[2].spentAgo: expected one per usage pair");
    expect(() => packEntry({ ...entry, spentAgo: [1.5, 0] }, 0)).toThrow("entries[0].spentAgo[0]");
  });

  it("refuses a count or time the script could not hold exactly, naming the entry and the field", () => {
    const bad = (change: Partial<SyncEntry>): SyncRequest => {
      const [first, second] = request(["a", "b"]).entries as [SyncEntry, SyncEntry];
      return { ...request(["a", "b"]), entries: [first, { ...second, ...change }] };
    };
    expect(() => encodeSync("tg", bad({ offered: -1 }), 0)).toThrow("entries[1].offered: expected an integer >= 0");
    expect(() => encodeSync("tg", bad({ want: 1.5 }), 0)).toThrow("entries[1].want");
    expect(() => encodeSync("tg", bad({ usage: [[2 ** 53, 1]] }), 0)).toThrow("entries[1].usage[0][0]");
    expect(() => encodeSync("tg", bad({ refunds: [[10, Number.NaN]] }), 0)).toThrow("entries[1].refunds[0][1]");
  });
});
