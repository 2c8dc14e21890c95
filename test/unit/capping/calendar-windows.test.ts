// Calendar periods in the user's zone (calendar-windows.ts) against the reference model's, written from the
// contract (test/support/calendar-model.ts): every IANA zone the platform's ICU knows, DST transition days
// included, and the policy's first weekday.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  CALENDAR_MAX_MS,
  type CalendarWindow,
  periodBoundaries,
  periodHolding,
  WEEK_STARTS,
  type WeekStart,
} from "../../../functions/core/capping/calendar-windows.ts";
import { modelPeriod } from "../../support/calendar-model.ts";
import { transitionsOf, YEAR_START } from "../../support/zone-transitions.ts";

// pinned: instants handed to the pure period functions, never compared with the calendar
const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const ZONES = [...Intl.supportedValuesOf("timeZone"), "UTC"];

const ZONES_WITH_DST = ["America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "America/Santiago", "Asia/Beirut"];

/** An instant of 2026: anywhere, or within two days of one of the zone's offset changes. */
const instantIn = (zone: string) => {
  const transitions = transitionsOf(zone);
  const anywhere = fc.integer({ min: YEAR_START, max: YEAR_START + 364 * DAY });
  if (transitions.length === 0) return anywhere;
  return fc.oneof(
    anywhere,
    fc.tuple(fc.constantFrom(...transitions), fc.integer({ min: -2 * DAY, max: 2 * DAY })).map(([t, d]) => t + d),
  );
};

const kindArb = fc.constantFrom<CalendarWindow>("day", "week", "month");
const weekStartArb = fc.constantFrom<WeekStart>(...WEEK_STARTS);

describe("calendar periods against the model", () => {
  it("give the model's period for random zones, instants (DST days included), kinds and first weekdays", () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...ZONES, ...ZONES_WITH_DST).chain((zone) => fc.tuple(fc.constant(zone), instantIn(zone))),
        kindArb,
        weekStartArb,
        ([zone, instant], kind, weekStart) => {
          const period = periodHolding(zone, kind, instant, weekStart);
          expect(period).toEqual(modelPeriod(zone, kind, instant, weekStart));
          expect(period[0]).toBeLessThanOrEqual(instant);
          expect(period[1]).toBeGreaterThan(instant);
          expect(period[1] - period[0]).toBeLessThanOrEqual(CALENDAR_MAX_MS[kind]);
        },
      ),
      { numRuns: 300 },
    );
  });

  // pinned: instants handed to the pure period functions, never compared with the calendar
  it("list the following periods' ends until one lies past the bound", () => {
    const at = Date.UTC(2026, 10, 1, 12);
    const boundaries = periodBoundaries("America/New_York", "day", at, at + 3 * DAY);
    expect(boundaries[0]).toBe(Date.UTC(2026, 10, 1, 4));
    // the 25-hour day of the fall-back, then days of 24 hours in EST
    expect(boundaries.slice(1)).toEqual([5, 29, 53, 77].map((h) => Date.UTC(2026, 10, 2, h)));
  });
});

// pinned: instants handed to the pure period functions, never compared with the calendar
describe("calendar periods, hostile but valid", () => {
  it("puts 23:59:59.999 and 00:00 local on different days", () => {
    // Europe/Berlin in winter: UTC+1
    const lastMs = Date.UTC(2026, 11, 2, 22, 59, 59, 999);
    expect(periodHolding("Europe/Berlin", "day", lastMs)).toEqual([Date.UTC(2026, 11, 1, 23), lastMs + 1]);
    expect(periodHolding("Europe/Berlin", "day", lastMs + 1)[0]).toBe(lastMs + 1);
  });

  // pinned: instants handed to the pure period functions, never compared with the calendar
  it("makes the spring-forward day 23 hours and the fall-back day 25 (America/New_York 2026)", () => {
    const [springStart, springEnd] = periodHolding("America/New_York", "day", Date.UTC(2026, 2, 8, 12));
    expect([springStart, springEnd]).toEqual([Date.UTC(2026, 2, 8, 5), Date.UTC(2026, 2, 9, 4)]);
    const [fallStart, fallEnd] = periodHolding("America/New_York", "day", Date.UTC(2026, 10, 1, 12));
    expect((fallEnd - fallStart) / HOUR).toBe(25);
    expect((springEnd - springStart) / HOUR).toBe(23);
  });

  // pinned: instants handed to the pure period functions, never compared with the calendar
  it("starts a day at the end of a DST gap that swallows midnight (America/Santiago, Asia/Beirut)", () => {
    // Chile: Saturday 24:00 becomes Sunday 01:00 (UTC-4 to UTC-3)
    expect(periodHolding("America/Santiago", "day", Date.UTC(2026, 8, 6, 12))).toEqual([
      Date.UTC(2026, 8, 6, 4),
      Date.UTC(2026, 8, 7, 3),
    ]);
    // Lebanon: Sunday 00:00 becomes 01:00 (UTC+2 to UTC+3)
    expect(periodHolding("Asia/Beirut", "day", Date.UTC(2026, 2, 29, 12))[0]).toBe(Date.UTC(2026, 2, 28, 22));
  });

  // pinned: instants handed to the pure period functions, never compared with the calendar
  it("follows a 45-minute offset (Asia/Kathmandu, UTC+5:45)", () => {
    expect(periodHolding("Asia/Kathmandu", "day", Date.UTC(2026, 10, 1, 12))).toEqual([
      Date.UTC(2026, 9, 31, 18, 15),
      Date.UTC(2026, 10, 1, 18, 15),
    ]);
  });

  // pinned: instants handed to the pure period functions, never compared with the calendar
  it("starts a week on the policy's first weekday (ISO Monday by default)", () => {
    // Wednesday 2026-12-02 in UTC
    const at = Date.UTC(2026, 11, 2, 12);
    expect(periodHolding("UTC", "week", at)).toEqual([Date.UTC(2026, 10, 30), Date.UTC(2026, 11, 7)]);
    expect(periodHolding("UTC", "week", at, "sunday")).toEqual([Date.UTC(2026, 10, 29), Date.UTC(2026, 11, 6)]);
    expect(periodHolding("UTC", "week", at, "wednesday")).toEqual([Date.UTC(2026, 11, 2), Date.UTC(2026, 11, 9)]);
  });

  // pinned: instants handed to the pure period functions, never compared with the calendar
  it("makes February 28 days and a month with the fall-back 31 days and an hour (Europe/Berlin)", () => {
    const [febStart, febEnd] = periodHolding("Europe/Berlin", "month", Date.UTC(2026, 1, 14));
    expect((febEnd - febStart) / DAY).toBe(28);
    const [octStart, octEnd] = periodHolding("Europe/Berlin", "month", Date.UTC(2026, 9, 14));
    expect(octEnd - octStart).toBe(31 * DAY + HOUR);
  });
});
