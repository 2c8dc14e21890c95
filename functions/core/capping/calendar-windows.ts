// Calendar windows: a cap's "window" may be "day", "week" or "month" of the user's zone instead of a rolling
// duration. A period runs from the first instant of its first local date to the first instant of the date
// after its last one, as the zone's offsets say (a day of 23, 24 or 25 hours; of 24 + 2 in Antarctica/Troll),
// worked out from Intl's offsets (zoneOffsetMs), never by assuming a day has 24 hours.
import { z } from "zod";
import { zoneOffsetMs } from "./quiet-hours.ts";

export const CALENDAR_WINDOWS = ["day", "week", "month"] as const;
export type CalendarWindow = (typeof CALENDAR_WINDOWS)[number];

export const WEEK_STARTS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"] as const;
export type WeekStart = (typeof WEEK_STARTS)[number];
/** ISO 8601: a week starts on Monday unless the policy says otherwise. */
export const DEFAULT_WEEK_START: WeekStart = "monday";

export const weekStartSchema = z.enum(WEEK_STARTS, {
  error: `expected a weekday: ${WEEK_STARTS.map((day) => `"${day}"`).join(", ")}`,
});

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;
/** The largest offset change of a day the time-zone data holds today (Antarctica/Troll: 2 hours). */
const MAX_DAY_SHIFT_MS = 2 * HOUR_MS;
/**
 * The longest each period can be: what retention and the backfill bound take for its window length (a send
 * in the period of a backfilled `at` is kept as long as a rolling window of this length would keep it).
 */
export const CALENDAR_MAX_MS: Readonly<Record<CalendarWindow, number>> = {
  day: DAY_MS + MAX_DAY_SHIFT_MS,
  week: 7 * DAY_MS + MAX_DAY_SHIFT_MS,
  month: 31 * DAY_MS + MAX_DAY_SHIFT_MS,
};

export function isCalendarWindow(text: string): text is CalendarWindow {
  return (CALENDAR_WINDOWS as readonly string[]).includes(text);
}

/** The local date (days since 1970-01-01) the zone's wall clock shows at `instant`. */
function localDay(zone: string, instant: number): number {
  return Math.floor((instant + zoneOffsetMs(zone, instant)) / DAY_MS);
}

/** First instants of local dates, by zone and date: a batch looks up a few per zone present. */
const starts = new Map<string, number>();
const MAX_CACHED_STARTS = 100_000;

/**
 * The first instant whose local date in `zone` is `day` (or later): local midnight, or the end of a DST gap
 * that swallows midnight (America/Santiago, Asia/Beirut).
 */
export function startOfLocalDay(zone: string, day: number): number {
  const key = `${zone}\n${day}`;
  const known = starts.get(key);
  if (known !== undefined) return known;
  const midnight = day * DAY_MS;
  // the usual case: the offset at local midnight, found in two steps
  let start = midnight - zoneOffsetMs(zone, midnight - zoneOffsetMs(zone, midnight));
  if (!(localDay(zone, start) >= day && localDay(zone, start - 1) < day)) {
    // a gap or a repeated hour at midnight: the earliest instant showing `day` or later, by bisection between
    // bounds every offset (-12 h to +14 h) keeps on either side
    let low = midnight - 15 * HOUR_MS;
    let high = midnight + 13 * HOUR_MS;
    while (high - low > 1) {
      const middle = Math.floor((low + high) / 2);
      if (localDay(zone, middle) >= day) high = middle;
      else low = middle;
    }
    start = high;
  }
  if (starts.size >= MAX_CACHED_STARTS) starts.clear();
  starts.set(key, start);
  return start;
}

/** The local date whose day holds `instant`: start(day) <= instant < start(day + 1). */
function dayHolding(zone: string, instant: number): number {
  let day = localDay(zone, instant);
  while (startOfLocalDay(zone, day) > instant) day--;
  while (startOfLocalDay(zone, day + 1) <= instant) day++;
  return day;
}

/** The first local date of the period of `kind` holding local date `day`, and the first of the next one. */
function periodDays(kind: CalendarWindow, day: number, weekStart: WeekStart): [number, number] {
  if (kind === "day") return [day, day + 1];
  if (kind === "week") {
    // 1970-01-01 was a Thursday: Monday-based weekday 3
    const weekday = (((day + 3) % 7) + 7) % 7;
    const first = day - ((weekday - WEEK_STARTS.indexOf(weekStart) + 7) % 7);
    return [first, first + 7];
  }
  const date = new Date(day * DAY_MS);
  const year = date.getUTCFullYear();
  const month = date.getUTCMonth();
  return [Date.UTC(year, month, 1) / DAY_MS, Date.UTC(year, month + 1, 1) / DAY_MS];
}

/** The period [start, end) of `kind` in `zone` that holds `instant`. */
export function periodHolding(
  zone: string,
  kind: CalendarWindow,
  instant: number,
  weekStart: WeekStart = DEFAULT_WEEK_START,
): [number, number] {
  const [first, next] = periodDays(kind, dayHolding(zone, instant), weekStart);
  return [startOfLocalDay(zone, first), startOfLocalDay(zone, next)];
}

/**
 * The boundaries of the periods of `kind` in `zone` from the one holding `at`: its start, its end, then each
 * following period's end until one lies past `until` (after it no send can be counted yet).
 */
export function periodBoundaries(
  zone: string,
  kind: CalendarWindow,
  at: number,
  until: number,
  weekStart: WeekStart = DEFAULT_WEEK_START,
): number[] {
  const [start, end] = periodHolding(zone, kind, at, weekStart);
  const boundaries = [start, end];
  let last = end;
  while (last <= until) {
    last = periodHolding(zone, kind, last, weekStart)[1];
    boundaries.push(last);
  }
  return boundaries;
}
