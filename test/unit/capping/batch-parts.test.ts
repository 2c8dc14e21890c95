// Deciding a batch in parts: its users grouped by segment and zone pair, and the parts' results merged back.
import { describe, expect, it } from "vitest";
import { mergeDecided, mergeParts, partsOf } from "../../../functions/core/capping/batch-parts.ts";
import type { CapBatchResult } from "../../../functions/core/capping/decisions.ts";

const result = (over: Partial<CapBatchResult>): CapBatchResult => ({
  at: 5,
  policyVersion: "p.1",
  decisions: [],
  totals: {},
  ...over,
});

describe("partsOf", () => {
  it("puts each user in its pair's part, each part's input positions ascending", () => {
    // sorted users' pairs and their input positions; pairs 1 and 3 in part 0, 7 and 9 in part 1
    const pairs = Uint32Array.from([7, 3, 3, 9, 7, 1]);
    const positions = Uint32Array.from([5, 0, 4, 1, 2, 3]);
    const partOf = new Map([
      [1, 0],
      [3, 0],
      [7, 1],
      [9, 1],
    ]);
    expect(partsOf(pairs, positions, partOf)).toEqual([
      [0, 3, 4],
      [1, 2, 5],
    ]);
  });
});

describe("mergeParts", () => {
  it("puts each part's decisions at their input positions and adds the figures", () => {
    const a = result({
      decisions: [
        { userId: 10, segment: "s", decision: "allowed" },
        { userId: 12, segment: "s", decision: "capped" },
      ],
      totals: { s: { allowed: 1, capped: 1, duplicate: 0, exempt: 0, cappedBy: { "push:day": 1 } } },
      held: {
        judgedAt: 5,
        zones: { UTC: { quiet: 0, deferred: 1, dropped: 0 } },
        deferred: [{ eligibleAt: 9, userIds: [30] }],
      },
    });
    const b = result({
      decisions: [{ userId: 11, segment: "s", decision: "capped" }],
      totals: {
        s: { allowed: 0, capped: 1, duplicate: 0, exempt: 0, cappedBy: { "push:day": 1 }, displaced: 2 },
        t: { allowed: 3, capped: 0, duplicate: 0, exempt: 0, cappedBy: {} },
      },
      held: {
        judgedAt: 5,
        zones: { UTC: { quiet: 1, deferred: 1, dropped: 0 }, "Asia/Tokyo": { quiet: 0, deferred: 0, dropped: 1 } },
        deferred: [
          { eligibleAt: 9, userIds: [20] },
          { eligibleAt: 4, userIds: [21] },
        ],
      },
    });
    const merged = mergeParts(3, [
      { positions: [0, 2], result: a },
      { positions: [1], result: b },
    ]);
    expect(merged.decisions.map((d) => d.userId)).toEqual([10, 11, 12]);
    expect(merged.totals).toEqual({
      s: { allowed: 1, capped: 2, duplicate: 0, exempt: 0, cappedBy: { "push:day": 2 }, displaced: 2 },
      t: { allowed: 3, capped: 0, duplicate: 0, exempt: 0, cappedBy: {} },
    });
    expect(merged.held).toEqual({
      judgedAt: 5,
      zones: { UTC: { quiet: 1, deferred: 2, dropped: 0 }, "Asia/Tokyo": { quiet: 0, deferred: 0, dropped: 1 } },
      deferred: [
        { eligibleAt: 4, userIds: [21] },
        { eligibleAt: 9, userIds: [20, 30] },
      ],
    });
    // the parts' own totals are not changed by the merge
    expect(a.totals.s?.capped).toBe(1);
  });

  it("leaves held out when no part held anything", () => {
    expect(mergeParts(0, [{ positions: [], result: result({}) }]).held).toBeUndefined();
  });
});

describe("mergeDecided", () => {
  it("reports the finished parts' decisions and the failed part's answered ones", () => {
    const done = result({ decisions: [{ userId: 1, segment: "s", decision: "allowed" }] });
    const partial = result({ decisions: [{ userId: 2, segment: "s", decision: "allowed" }] });
    expect(mergeDecided([done], partial).decisions.map((d) => d.userId)).toEqual([1, 2]);
    expect(mergeDecided([done]).decisions.map((d) => d.userId)).toEqual([1]);
  });
});
