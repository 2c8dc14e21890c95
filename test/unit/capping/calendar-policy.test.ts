// Calendar caps in the policy: "window": "day" | "week" | "month" beside rolling durations, the policy's
// first weekday, and every refusal naming its field.
import { describe, expect, it } from "vitest";
import { CALENDAR_MAX_MS } from "../../../functions/core/capping/calendar-windows.ts";
import { parsePolicy } from "../../../functions/core/capping/policy.ts";
import { MAX_FUTURE_MS } from "../../../functions/core/shared/clock.ts";
import { InvalidPolicyError } from "../../../functions/core/shared/errors.ts";

const policyWith = (caps: unknown[], extra: Record<string, unknown> = {}) => ({
  version: "calendar.1",
  channels: ["push", "email"],
  segments: [],
  default: { name: "everyone", caps: { push: caps } },
  ...extra,
});

function issuesOf(document: unknown): readonly string[] {
  try {
    parsePolicy(document);
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidPolicyError);
    return (error as InvalidPolicyError).issues;
  }
  throw new Error("expected the policy to be rejected");
}

describe("calendar caps in the policy", () => {
  it("compiles day, week and month caps beside rolling ones, each kept as long as its longest period", () => {
    const policy = parsePolicy(
      policyWith([
        { window: "day", max: 1 },
        { window: "week", max: 3 },
        { window: "month", max: 8 },
        { window: "6h", max: 1 },
      ]),
    );
    expect(policy.capsFor(0, "push").map(({ window, calendar, windowMs }) => ({ window, calendar, windowMs }))).toEqual(
      [
        { window: "day", calendar: "day", windowMs: CALENDAR_MAX_MS.day },
        { window: "week", calendar: "week", windowMs: CALENDAR_MAX_MS.week },
        { window: "month", calendar: "month", windowMs: CALENDAR_MAX_MS.month },
        { window: "6h", calendar: undefined, windowMs: 6 * 3_600_000 },
      ],
    );
    expect(policy.hasCalendarCaps("push")).toBe(true);
    expect(policy.hasCalendarCaps("email")).toBe(false);
    expect(policy.weekStarts).toBe("monday");
    // a backfill into the month's first day still finds every send of that month: 31 days and 2 hours back
    expect(policy.backfillMs).toBe(31 * 86_400_000 + 2 * 3_600_000);
    expect(policy.retentionMs(0)).toBe(2 * CALENDAR_MAX_MS.month + MAX_FUTURE_MS);
  });

  it("takes the policy's first weekday", () => {
    expect(parsePolicy(policyWith([{ window: "week", max: 2 }], { weekStarts: "sunday" })).weekStarts).toBe("sunday");
  });

  it("refuses an unknown window, naming the field", () => {
    expect(issuesOf(policyWith([{ window: "fortnight", max: 1 }]))).toEqual([
      'default.caps.push[0].window: expected e.g. "7d", or a calendar window ("day", "week", "month")',
    ]);
    // calendar names are lower case, as every other policy word
    expect(issuesOf(policyWith([{ window: "Day", max: 1 }]))[0]).toMatch(/^default\.caps\.push\[0\]\.window: /);
  });

  it("refuses a calendar cap of max < 1 (a cap of 0 takes a duration)", () => {
    expect(issuesOf(policyWith([{ window: "day", max: 0 }]))).toEqual([
      'default.caps.push[0].max: expected at least 1 for a calendar window ("day"); a cap of 0 takes a duration',
    ]);
    expect(issuesOf(policyWith([{ window: "week", max: -1 }]))[0]).toMatch(/^default\.caps\.push\[0\]\.max: /);
  });

  it("refuses a cap that gives both a window and a windowMs", () => {
    // a cap's length is its `window` alone: a second length field is refused, never silently preferred
    expect(issuesOf(policyWith([{ window: "day", windowMs: 86_400_000, max: 1 }]))).toEqual([
      "default.caps.push[0].windowMs: unknown field",
    ]);
  });

  it("refuses a first weekday it does not know, naming the field", () => {
    for (const weekStarts of ["sun", "Sunday", 0]) {
      expect(issuesOf(policyWith([{ window: "week", max: 1 }], { weekStarts }))).toEqual([
        'weekStarts: expected a weekday: "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"',
      ]);
    }
  });
});
