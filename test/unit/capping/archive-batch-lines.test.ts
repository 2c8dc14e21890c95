// A campaign batch's archive line holds every decision of the batch: read back (runs expanded in order,
// each user's code looked up in the class table) it gives each user's segment, decision and cap, for any
// order of user IDs, and a batch with more classes than there are codes is split into lines that together
// hold every decision once.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { CLASS_CODES, campaignDecisionLines } from "../../../functions/core/capping/archive-lines.ts";
import type { CapBatchResult, CapDecision, DecisionKind } from "../../../functions/core/capping/decisions.ts";
import type { CapRule } from "../../../functions/core/capping/policy.ts";

interface BatchLine {
  kind: string;
  campaignId: string;
  channel: string;
  at: number;
  decidedAt: number;
  policyVersion: string;
  records: number;
  users: [number, number][];
  classes: string;
  classTable: { segment: string; decision: string; cap?: string; capMax?: number; capWindowMs?: number }[];
}

/** The reader the DuckDB view and the Athena queries are: one row per user, in the line's order. */
function rowsOf(line: BatchLine) {
  const ids = line.users.flatMap(([first, last]) => Array.from({ length: last - first + 1 }, (_, i) => first + i));
  expect(ids).toHaveLength(line.records);
  expect(line.classes).toHaveLength(line.records);
  return ids.map((userId, i) => {
    const c = line.classTable[CLASS_CODES.indexOf(line.classes[i] as string)];
    if (!c) throw new Error(`code ${line.classes[i]} names no class`);
    return { userId, segment: c.segment, decision: c.decision, cap: c.cap ?? null };
  });
}

function linesOf(decisions: CapDecision[]) {
  const result: CapBatchResult = { at: 1_000, policyVersion: "p.1", decisions, totals: {} };
  const lines: { line: BatchLine; records: number }[] = [];
  campaignDecisionLines({ campaignId: "c", channel: "push" }, result, 2_000, (text, records) =>
    lines.push({ line: JSON.parse(text) as BatchLine, records }),
  );
  return lines;
}

const caps: CapRule[] = [
  { channel: "push", window: "1d", windowMs: 86_400_000, max: 1 },
  { channel: "*", window: "7d", windowMs: 604_800_000, max: 3 },
];
const kinds: DecisionKind[] = ["allowed", "capped", "duplicate", "exempt"];
const decisionArbitrary = fc.record({
  userId: fc.integer({ min: 0, max: 0xffff_ffff }),
  segment: fc.constantFrom("new", "active", "unsegmented"),
  kind: fc.constantFrom(...kinds),
  cap: fc.constantFrom(0, 1),
});

describe("a campaign batch's archive line", () => {
  it("reads back as each user's decision, in the batch's order, for any user IDs", () => {
    fc.assert(
      fc.property(fc.array(decisionArbitrary, { maxLength: 300 }), fc.boolean(), (drawn, consecutive) => {
        const decisions: CapDecision[] = drawn.map((d, i) => ({
          userId: consecutive ? 1_000 + i : d.userId,
          segment: d.segment,
          decision: d.kind,
          ...(d.kind === "capped" ? { cap: caps[d.cap] } : {}),
        }));
        const lines = linesOf(decisions);
        const rows = lines.flatMap(({ line, records }) => {
          expect(line).toMatchObject({ kind: "campaign-batch", campaignId: "c", channel: "push", at: 1_000 });
          expect(line.records).toBe(records);
          return rowsOf(line);
        });
        expect(rows).toEqual(
          decisions.map((d) => ({
            userId: d.userId,
            segment: d.segment,
            decision: d.decision,
            cap: d.cap ? `${d.cap.channel}:${d.cap.window}` : null,
          })),
        );
        if (consecutive && decisions.length > 0)
          expect(lines[0]?.line.users).toEqual([[1_000, 999 + decisions.length]]);
      }),
    );
  });

  it("carries the cap that bit with its window and max, once per class", () => {
    const [only] = linesOf([
      { userId: 7, segment: "new", decision: "capped", cap: caps[0] },
      { userId: 8, segment: "new", decision: "capped", cap: caps[0] },
      { userId: 9, segment: "new", decision: "allowed" },
    ]);
    expect(only?.line.classTable).toEqual([
      {
        segment: "new",
        decision: "capped",
        reason: "cap",
        cap: "push:1d",
        capChannel: "push",
        capWindowMs: 86_400_000,
        capMax: 1,
        capUsed: 1,
      },
      { segment: "new", decision: "allowed" },
    ]);
    expect(only?.line.classes).toBe("001");
    expect(only?.line.users).toEqual([[7, 9]]);
  });

  it("splits a batch with more classes than codes into lines that hold every decision once", () => {
    // 100 segments × allowed: 100 classes, more than the 64 codes
    const decisions: CapDecision[] = Array.from({ length: 300 }, (_, i) => ({
      userId: i,
      segment: `s${i % 100}`,
      decision: "allowed",
    }));
    const lines = linesOf(decisions);
    expect(lines.length).toBeGreaterThan(1);
    expect(lines.every(({ line }) => line.classTable.length <= CLASS_CODES.length)).toBe(true);
    expect(lines.reduce((sum, { records }) => sum + records, 0)).toBe(300);
    expect(lines.flatMap(({ line }) => rowsOf(line)).map((row) => [row.userId, row.segment])).toEqual(
      decisions.map((d) => [d.userId, d.segment]),
    );
  });
});
