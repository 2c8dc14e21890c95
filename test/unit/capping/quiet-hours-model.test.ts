// Quiet hours against a model written from the contract: an instant is quiet when its local weekday, hour and
// minute in the zone (as Intl names them) fall inside a window; eligibleAt is the earliest instant from then
// on that is not, found by walking the minutes. Random IANA zones, instants around their offset changes.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  compileWindows,
  eligibleAt,
  isQuiet,
  longestFreeMinutes,
  MIN_FREE_MINUTES,
  type QuietWindow,
  WEEKDAYS,
  zoneOffsetMs,
} from "../../../functions/core/capping/quiet-hours.ts";

const ZONES = Intl.supportedValuesOf("timeZone");
const MINUTE = 60_000;
const HOUR = 3_600_000;
const DAY = 86_400_000;
// pinned: the span the pure functions are given instants from, 2015-01-01 to 2035-01-01 UTC
const SPAN = { from: 1_420_070_400_000, to: 2_051_222_400_000 };

const shortDays = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const partsFormat = new Map<string, Intl.DateTimeFormat>();
function localOf(zone: string, instant: number): { weekday: number; minute: number } {
  let format = partsFormat.get(zone);
  if (!format) {
    format = new Intl.DateTimeFormat("en-US", {
      timeZone: zone,
      weekday: "short",
      hour: "numeric",
      minute: "numeric",
      hourCycle: "h23",
    });
    partsFormat.set(zone, format);
  }
  const parts = format.formatToParts(instant);
  const value = (type: string) => parts.find((part) => part.type === type)?.value as string;
  return { weekday: shortDays.indexOf(value("weekday")), minute: Number(value("hour")) * 60 + Number(value("minute")) };
}

/** The contract: quiet when the local time is in a window that started today, or yesterday and crosses midnight. */
function modelQuiet(windows: readonly QuietWindow[], zone: string, instant: number): boolean {
  const { weekday, minute } = localOf(zone, instant);
  const on = (window: QuietWindow, day: number) => !window.days || window.days.includes((day + 7) % 7);
  return windows.some((w) =>
    w.from < w.to
      ? on(w, weekday) && minute >= w.from && minute < w.to
      : (on(w, weekday) && minute >= w.from) || (on(w, weekday - 1) && minute < w.to),
  );
}

/** The contract: the first instant from `instant` on that is not quiet (offsets and windows move on whole minutes). */
function modelEligibleAt(windows: readonly QuietWindow[], zone: string, instant: number): number | undefined {
  if (!modelQuiet(windows, zone, instant)) return undefined;
  for (let t = Math.ceil(instant / MINUTE) * MINUTE; t < instant + 9 * DAY; t += MINUTE) {
    if (!modelQuiet(windows, zone, t)) return t;
  }
  throw new Error("model: quiet for 9 days");
}

/** The next change of the zone's offset after `instant` within a year (model side: daily probes, then minutes). */
function nextChange(zone: string, instant: number): number | undefined {
  const offset = zoneOffsetMs(zone, instant);
  for (let day = instant + DAY; day < instant + 366 * DAY; day += DAY) {
    if (zoneOffsetMs(zone, day) !== offset) {
      let t = day - DAY;
      while (zoneOffsetMs(zone, t) === offset) t += MINUTE;
      return t;
    }
  }
  return undefined;
}

const clock = fc.integer({ min: 0, max: 1439 });
const windowArb = fc
  .record({
    from: clock,
    to: clock,
    days: fc.option(fc.uniqueArray(fc.constantFrom(...WEEKDAYS), { minLength: 1, maxLength: 7 }), { nil: undefined }),
  })
  .filter((w) => w.from !== w.to)
  .map((w) => (w.days === undefined ? { from: w.from, to: w.to } : w));
const caseArb = fc.record({
  zone: fc.constantFrom(...ZONES),
  base: fc.integer({ min: SPAN.from, max: SPAN.to }),
  nearChange: fc.boolean(),
  shift: fc.integer({ min: -36 * HOUR, max: 36 * HOUR }),
  // the policy refuses windows that leave less free time a week (policy.ts)
  windows: fc
    .array(windowArb, { minLength: 1, maxLength: 3 })
    .filter((windows) => longestFreeMinutes(compileWindows(windows)) >= MIN_FREE_MINUTES),
});

describe("quiet hours in the user's zone", () => {
  it("says quiet and eligibleAt exactly as the model does, over random zones and their DST changes", () => {
    fc.assert(
      fc.property(caseArb, ({ zone, base, nearChange, shift, windows }) => {
        const change = nearChange ? nextChange(zone, base) : undefined;
        const instant = (change ?? base) + shift;
        const compiled = compileWindows(windows);
        expect(isQuiet(compiled, zone, instant)).toBe(modelQuiet(compiled, zone, instant));
        const eligible = eligibleAt(compiled, zone, instant);
        expect(eligible).toBe(modelEligibleAt(compiled, zone, instant));
        if (eligible !== undefined) expect(isQuiet(compiled, zone, eligible)).toBe(false);
      }),
      { numRuns: 400 },
    );
  });

  it("ends a 21:00-08:00 night at 08:00 local on the night New York springs forward (a 10-hour night)", () => {
    const [night] = [compileWindows([{ from: 21 * 60, to: 8 * 60 }])];
    // pinned: the pure function is given 2026-03-08 03:00 UTC (22:00 EST the evening before)
    const evening = 1_772_938_800_000;
    // 08:00 EDT = 12:00 UTC
    expect(eligibleAt(night, "America/New_York", evening)).toBe(evening + 9 * HOUR);
  });

  it("lets a send out in the repeated hour when the clock falls back out of a window that started at 01:30", () => {
    const windows = compileWindows([{ from: 90, to: 8 * 60 }]);
    // pinned: the pure function is given 2026-11-01 05:45 UTC, 01:45 EDT, the first 01:45 of the night
    const first = 1_793_511_900_000;
    // 06:00 UTC the clock goes back to 01:00 EST: outside the window until 01:30 EST
    expect(eligibleAt(windows, "America/New_York", first)).toBe(first + 15 * MINUTE);
    expect(isQuiet(windows, "America/New_York", first + 15 * MINUTE + 29 * MINUTE)).toBe(false);
    expect(isQuiet(windows, "America/New_York", first + 15 * MINUTE + 30 * MINUTE)).toBe(true);
  });

  it("keeps weekday windows to the day they start on: Friday 22:00 to Saturday 09:00 only", () => {
    const windows = compileWindows([{ from: 22 * 60, to: 9 * 60, days: ["fri"] }]);
    // pinned: the pure function is given Saturday 2026-12-05 08:00 UTC, then Sunday 08:00
    const saturday = 1_796_457_600_000;
    expect(eligibleAt(windows, "UTC", saturday)).toBe(saturday + HOUR);
    expect(eligibleAt(windows, "UTC", saturday + DAY)).toBeUndefined();
  });
});
