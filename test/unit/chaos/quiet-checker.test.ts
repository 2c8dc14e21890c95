// The quiet-hours pipeline checker on hand-made runs: users in New York (night ends 08:00 EST, 13:00 UTC on
// 2027-01-15) and Kolkata (18:30 then, not quiet), quiet hours 21:00-08:00 on inapp, campaigns deferring 8 s.
import { describe, expect, it } from "vitest";
import {
  checkQuietPipeline,
  firstFreeInstant,
  type HeldReport,
  isQuiet,
  type QuietContract,
  type QuietOutput,
  type QuietPushed,
  type TimedDelivery,
} from "../../../scripts/chaos/quiet-checker.ts";

// pinned: the instant the hand-made runs are dated around; the checker reads no clock
const EDGE = Date.UTC(2027, 0, 15, 13, 0, 0);
const NY = 1;
const KOLKATA = 2;
const contract: QuietContract = {
  caps: [{ channel: "inapp", windowMs: 2_000, max: 1 }],
  channel: "inapp",
  windows: [{ from: "21:00", to: "08:00" }],
  zoneOf: (userId) => (userId === NY ? "America/New_York" : "Asia/Kolkata"),
};

const pushed = (seq: number, at: number, userIds: number[], deferMaxMs?: number): QuietPushed => ({
  seq,
  campaignId: `q${seq}`,
  channel: "inapp",
  userIds,
  at,
  deferMaxMs,
});
const delivery = (m: QuietPushed, userId: number, sentAt: number, dedupeId?: string): TimedDelivery => ({
  seq: m.seq,
  campaignId: m.campaignId,
  channel: m.channel,
  userId,
  dedupeId: dedupeId ?? `${m.campaignId}:${m.channel}:${userId}`,
  sentAt,
});
const held = (m: QuietPushed, userId: number, decidedAt: number, decision: HeldReport["decision"] = "deferred") => ({
  seq: m.seq,
  userId,
  decision,
  byCap: false,
  decidedAt,
});

/** Message 0 at EDGE − 3 s to both users, deferring 8 s: New York held to EDGE, Kolkata delivered at once. */
function goodRun(): QuietOutput {
  const m = pushed(0, EDGE - 3000, [NY, KOLKATA], 8000);
  return {
    pushed: [m],
    delivered: [delivery(m, KOLKATA, EDGE - 2950), delivery(m, NY, EDGE + 1100)],
    reports: [held(m, NY, EDGE - 2950)],
    deadLettered: [],
  };
}
const failed = (output: QuietOutput) =>
  checkQuietPipeline(output, contract)
    .verdicts.filter((v) => !v.pass)
    .map((v) => v.rule);

describe("the quiet-hours model", () => {
  it("names New York quiet until 08:00 local and free from then, Kolkata free at 18:30", () => {
    expect(isQuiet(EDGE - 1, "America/New_York", contract.windows)).toBe(true);
    expect(isQuiet(EDGE, "America/New_York", contract.windows)).toBe(false);
    expect(firstFreeInstant(EDGE - 3000, "America/New_York", contract.windows)).toBe(EDGE);
    expect(firstFreeInstant(EDGE - 3000, "Asia/Kolkata", contract.windows)).toBe(EDGE - 3000);
    // Shanghai's night starts at that instant and ends at 08:00 local, 11 hours later
    expect(firstFreeInstant(EDGE, "Asia/Shanghai", contract.windows)).toBe(EDGE + 11 * 3_600_000);
  });
});

describe("the quiet-hours pipeline checker", () => {
  it("passes a run whose held send was delivered once after its night ended, the other at once", () => {
    const check = checkQuietPipeline(goodRun(), contract);
    expect(check.verdicts.filter((v) => !v.pass)).toEqual([]);
    expect(check.figures).toMatchObject({ pushedSends: 2, pushedInQuiet: 1, deferredQuiet: 1, deferredDelivered: 1 });
  });

  it("fails a delivery decided inside the user's quiet hours", () => {
    const run = goodRun();
    run.reports = [];
    run.delivered[1] = delivery(run.pushed[0] as QuietPushed, NY, EDGE - 2900);
    expect(failed(run)).toEqual(["quiet"]);
  });

  it("fails a deferred send delivered before its eligibleAt", () => {
    const run = goodRun();
    run.delivered[1] = delivery(run.pushed[0] as QuietPushed, NY, EDGE - 1);
    expect(failed(run)).toEqual(["deferral"]);
  });

  it("fails a held send delivered though its night ended more than maxMs after its first hold", () => {
    const m = pushed(0, EDGE - 20_000, [NY], 8000);
    const run: QuietOutput = {
      pushed: [m],
      delivered: [delivery(m, NY, EDGE + 1000)],
      reports: [held(m, NY, EDGE - 19_900)],
      deadLettered: [],
    };
    expect(failed(run)).toEqual(["deferral"]);
  });

  it("fails a send dropped though its night ended within maxMs", () => {
    const run = goodRun();
    run.delivered = run.delivered.slice(0, 1);
    run.reports.push(held(run.pushed[0] as QuietPushed, NY, EDGE - 2900, "dropped"));
    expect(failed(run)).toEqual(["deferral"]);
  });

  it("fails a send delivered under a second dedupe id", () => {
    const run = goodRun();
    run.delivered.push(delivery(run.pushed[0] as QuietPushed, NY, EDGE + 1200, "q0:inapp:1:again"));
    expect(failed(run)).toContain("dedupe");
  });

  it("fails two sends of two campaigns to one user in one 2 s window", () => {
    const run = goodRun();
    const second = pushed(1, EDGE - 2000, [KOLKATA]);
    run.pushed.push(second);
    run.delivered.push(delivery(second, KOLKATA, EDGE - 1900));
    expect(failed(run)).toEqual(["window"]);
  });

  it("passes a repeat of a delivered send under its own dedupe id", () => {
    const run = goodRun();
    run.delivered.push(delivery(run.pushed[0] as QuietPushed, NY, EDGE + 1500));
    const check = checkQuietPipeline(run, contract);
    expect(check.verdicts.filter((v) => !v.pass)).toEqual([]);
    expect(check.figures.repeats).toBe(1);
  });

  it("fails a pushed send neither delivered, reported nor dead-lettered, and passes it dead-lettered with a reason", () => {
    const run = goodRun();
    run.delivered = run.delivered.slice(0, 1);
    expect(failed(run)).toEqual(["lost"]);
    run.deadLettered = [{ seq: 0, reason: "StoreLostError" }];
    expect(failed(run)).toEqual([]);
  });
});
