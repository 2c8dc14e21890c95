// A reference model of calendar windows, written from the contract (docs/api.md, "Calendar windows"), not
// from the script or calendar-windows.ts: a "day" is every instant whose local date (as Intl formats it in
// the user's zone) is one date, from the first such instant; a "week" the 7 dates from the policy's first
// weekday; a "month" the dates of one month. A send counts in the period holding its own time; a send is
// allowed only while every calendar cap's period holding its `at`, and every rolling window of each rolling
// cap containing it, holds at most max with it.
import { parseDuration } from "../../functions/core/shared/duration.ts";
import { worstWindowWith } from "./capping-model.ts";

export interface ModelCalendarCap {
  window: string;
  max: number;
}

const HOUR = 3_600_000;
const WEEKDAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const FULL_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"];

const dateFormats = new Map<string, Intl.DateTimeFormat>();
/** "YYYY-MM-DD Www" of the instant in the zone, as Intl shows it. */
export function localDate(zone: string, instant: number): { date: string; weekday: number } {
  let format = dateFormats.get(zone);
  if (!format) {
    format = new Intl.DateTimeFormat("en-CA", {
      timeZone: zone,
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
      weekday: "short",
    });
    dateFormats.set(zone, format);
  }
  const parts = format.formatToParts(instant);
  const part = (type: string) => parts.find((p) => p.type === type)?.value as string;
  return {
    date: `${part("year")}-${part("month")}-${part("day")}`,
    weekday: WEEKDAYS.indexOf(part("weekday")),
  };
}

/** The first instant of the run of instants, around `instant`, that show the same local date. */
function startOfDateHolding(zone: string, instant: number): number {
  const { date } = localDate(zone, instant);
  // back an hour at a time to an instant of an earlier date, then bisect to the millisecond
  let low = instant;
  while (localDate(zone, low).date === date) low -= HOUR;
  let high = instant;
  while (high - low > 1) {
    const middle = Math.floor((low + high) / 2);
    if (localDate(zone, middle).date === date) high = middle;
    else low = middle;
  }
  return high;
}

/** The first instant of the local date after the one `instant` shows. */
function startOfNextDate(zone: string, instant: number): number {
  const { date } = localDate(zone, instant);
  let high = instant;
  while (localDate(zone, high).date === date) high += HOUR;
  let low = instant;
  while (high - low > 1) {
    const middle = Math.floor((low + high) / 2);
    if (localDate(zone, middle).date === date) low = middle;
    else high = middle;
  }
  return high;
}

const periods = new Map<string, [number, number]>();
/** The calendar period [start, end) of `window` holding `instant` in `zone` (remembered by its local date). */
export function modelPeriod(zone: string, window: string, instant: number, weekStarts = "monday"): [number, number] {
  const key = `${zone} ${window} ${weekStarts} ${localDate(zone, instant).date}`;
  let period = periods.get(key);
  if (period === undefined || instant < period[0] || instant >= period[1]) {
    period = searchPeriod(zone, window, instant, weekStarts);
    periods.set(key, period);
  }
  return period;
}

function searchPeriod(zone: string, window: string, instant: number, weekStarts: string): [number, number] {
  const dayStart = startOfDateHolding(zone, instant);
  if (window === "day") return [dayStart, startOfNextDate(zone, instant)];
  if (window === "week") {
    let start = dayStart;
    const first = FULL_WEEKDAYS.indexOf(weekStarts);
    while (localDate(zone, start).weekday !== first) start = startOfDateHolding(zone, start - 1);
    let end = startOfNextDate(zone, instant);
    while (localDate(zone, end).weekday !== first) end = startOfNextDate(zone, end);
    return [start, end];
  }
  if (window !== "month") throw new Error(`not a calendar window: ${window}`);
  const month = localDate(zone, instant).date.slice(0, 7);
  let start = dayStart;
  while (localDate(zone, start - 1).date.slice(0, 7) === month) start = startOfDateHolding(zone, start - 1);
  let end = startOfNextDate(zone, instant);
  while (localDate(zone, end).date.slice(0, 7) === month) end = startOfNextDate(zone, end);
  return [start, end];
}

const isCalendar = (window: string) => window === "day" || window === "week" || window === "month";

export type CalendarDecision = "allowed" | "duplicate" | { capped: number };

export class CalendarModel {
  private readonly counted = new Map<number, { at: number; campaignId: string }[]>();

  constructor(
    private readonly caps: readonly ModelCalendarCap[],
    private readonly weekStarts = "monday",
  ) {}

  /** Decides a send of `user` living in `zone` and counts it when allowed. */
  apply(user: number, zone: string, at: number, campaignId: string): CalendarDecision {
    const log = this.counted.get(user) ?? [];
    this.counted.set(user, log);
    if (campaignId !== "" && log.some((send) => send.campaignId === campaignId)) return "duplicate";
    const times = log.map((send) => send.at);
    const capped = this.caps.findIndex((cap) => {
      if (isCalendar(cap.window)) {
        const [start, end] = modelPeriod(zone, cap.window, at, this.weekStarts);
        return times.filter((t) => t >= start && t < end).length + 1 > cap.max;
      }
      return worstWindowWith(times, at, parseDuration(cap.window) as number) > cap.max;
    });
    if (capped >= 0) return { capped };
    log.push({ at, campaignId });
    return "allowed";
  }

  /**
   * When a send of `user` refused at `at` is first allowed: the earliest instant after `at` at which every
   * cap admits it. A calendar cap's count drops only as a period ends and a rolling one's as a send leaves
   * its window, so those instants (within `horizonMs`) are tried in order; undefined: none of them.
   */
  eligibleAt(user: number, zone: string, at: number, horizonMs: number): number | undefined {
    const times = this.timesOf(user);
    const candidates = new Set<number>();
    for (const cap of this.caps) {
      if (isCalendar(cap.window)) {
        let end = modelPeriod(zone, cap.window, at, this.weekStarts)[1];
        while (end <= at + horizonMs) {
          candidates.add(end);
          end = modelPeriod(zone, cap.window, end, this.weekStarts)[1];
        }
      } else {
        const windowMs = parseDuration(cap.window) as number;
        for (const t of times) if (t + windowMs > at) candidates.add(t + windowMs);
      }
    }
    return [...candidates]
      .sort((a, b) => a - b)
      .find((x) =>
        this.caps.every((cap) => {
          if (!isCalendar(cap.window)) return worstWindowWith(times, x, parseDuration(cap.window) as number) <= cap.max;
          const [start, end] = modelPeriod(zone, cap.window, x, this.weekStarts);
          return times.filter((t) => t >= start && t < end).length + 1 <= cap.max;
        }),
      );
  }

  timesOf(user: number): number[] {
    return (this.counted.get(user) ?? []).map((send) => send.at);
  }
}
