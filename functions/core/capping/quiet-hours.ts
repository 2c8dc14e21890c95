// Quiet hours in the user's time zone: the policy's windows ("21:00"-"08:00", crossing midnight allowed,
// optionally on some weekdays only) and the exact instant a send that falls inside one becomes eligible.
// Wall-clock times come from the platform's time-zone data (Intl): an instant is quiet when its local
// date and time in the zone lie inside a window; DST gaps and repeated hours are handled by following the
// zone's offset changes, never by assuming a day has 24 hours.
import { z } from "zod";

export const WEEKDAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"] as const;
export type Weekday = (typeof WEEKDAYS)[number];

/** Every IANA zone the platform's ICU knows, and UTC (which some versions list only as "Etc/UTC"). */
export const SUPPORTED_ZONES: ReadonlySet<string> = new Set([...Intl.supportedValuesOf("timeZone"), "UTC"]);

const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;
/** A window lasts less than a day, so the quiet stretch holding an instant ends within a week and a day. */
const MAX_QUIET_MS = 8 * DAY_MS;

const clockTime = z
  .string()
  .regex(/^([01]\d|2[0-3]):[0-5]\d$/, 'expected a local time "HH:MM" from "00:00" to "23:59"')
  .transform((text) => Number(text.slice(0, 2)) * 60 + Number(text.slice(3)));

/**
 * Whether `zone` names an IANA zone the platform knows: one Intl.supportedValuesOf lists, or an alias of one
 * (ICU lists canonical names only: "Asia/Calcutta", not "Asia/Kolkata"). Offsets ("+05:30") are refused.
 */
export function isSupportedZone(zone: string): boolean {
  if (SUPPORTED_ZONES.has(zone)) return true;
  try {
    return SUPPORTED_ZONES.has(new Intl.DateTimeFormat("en-US", { timeZone: zone }).resolvedOptions().timeZone);
  } catch {
    return false;
  }
}

export const zoneSchema = z
  .string("expected an IANA time zone name")
  .max(64)
  .refine(isSupportedZone, "expected an IANA time zone name (Intl.supportedValuesOf, or an alias of one)");

export const quietWindowSchema = z
  .strictObject({
    from: clockTime,
    to: clockTime,
    /** The local weekdays the window starts on (default: every day); a window from Fri 21:00 ends Sat 08:00. */
    days: z.array(z.enum(WEEKDAYS)).min(1).max(7).optional(),
  })
  .refine((window) => window.from !== window.to, 'expected "from" and "to" to differ');

/** Quiet windows by channel ("*": every channel). */
export const quietHoursSchema = z.record(z.string(), z.array(quietWindowSchema).min(1).max(8));

/** One window in minutes of the local day: quiet from `from` to `to` (the next day when `to` ≤ `from`). */
export interface QuietWindow {
  from: number;
  to: number;
  /** Local weekdays it starts on, 0 = Monday; undefined: every day. */
  days?: readonly number[];
}

export function compileWindows(windows: readonly z.output<typeof quietWindowSchema>[]): QuietWindow[] {
  return windows.map(({ from, to, days }) =>
    days === undefined ? { from, to } : { from, to, days: days.map((day) => WEEKDAYS.indexOf(day)) },
  );
}

const formatters = new Map<string, Intl.DateTimeFormat>();

function formatterOf(zone: string): Intl.DateTimeFormat {
  let formatter = formatters.get(zone);
  if (!formatter) {
    formatter = new Intl.DateTimeFormat("en-US", {
      timeZone: zone,
      hourCycle: "h23",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
      second: "numeric",
    });
    formatters.set(zone, formatter);
  }
  return formatter;
}

/**
 * The zone's offset from UTC at `instant`, in ms (local wall clock = instant + offset), to the second: what
 * Intl shows of the instant's local date and time, read back as if it were UTC.
 */
export function zoneOffsetMs(zone: string, instant: number): number {
  const parts = formatterOf(zone).formatToParts(instant);
  const field = (type: string) => Number(parts.find((part) => part.type === type)?.value);
  const local = Date.UTC(
    field("year"),
    field("month") - 1,
    field("day"),
    field("hour"),
    field("minute"),
    field("second"),
  );
  const wholeSecond = instant - (((instant % 1000) + 1000) % 1000);
  return local - wholeSecond;
}

/**
 * A set of windows must leave this long free in every week (local time): then a send is never quiet for
 * more than a week, and a skipped hour (a DST gap) cannot swallow every free minute.
 */
export const MIN_FREE_MINUTES = 120;

/** The longest free stretch of the local week the windows leave, in minutes (weeks repeat: it may wrap). */
export function longestFreeMinutes(windows: readonly QuietWindow[]): number {
  const WEEK = 7 * 1440;
  const quiet = new Uint8Array(WEEK);
  for (const window of windows) {
    const length = (window.to - window.from + 1440) % 1440;
    for (let day = 0; day < 7; day++) {
      if (window.days && !window.days.includes(day)) continue;
      for (let m = 0; m < length; m++) quiet[(day * 1440 + window.from + m) % WEEK] = 1;
    }
  }
  let longest = 0;
  let run = 0;
  for (let i = 0; i < 2 * WEEK; i++) {
    run = quiet[i % WEEK] === 1 ? 0 : run + 1;
    longest = Math.max(longest, Math.min(run, WEEK));
  }
  return longest;
}

/** Whether the local wall-clock time `localMs` (ms of a naive local date and time) lies inside a window. */
export function quietAtLocal(windows: readonly QuietWindow[], localMs: number): boolean {
  return quietEndAtLocal(windows, localMs) !== undefined;
}

/**
 * The end (naive local ms) of the quiet stretch holding `localMs`: windows that overlap or touch are one
 * stretch. Undefined when `localMs` is in no window.
 */
function quietEndAtLocal(windows: readonly QuietWindow[], localMs: number): number | undefined {
  let end: number | undefined;
  let probe = localMs;
  // a stretch may chain windows (one ends where the next starts): follow it to its end
  for (let step = 0; step < 128; step++) {
    let next: number | undefined;
    for (const window of windows) {
      const windowEnd = windowEndHolding(window, probe);
      if (windowEnd !== undefined && (next === undefined || windowEnd > next)) next = windowEnd;
    }
    if (next === undefined) return end;
    end = next;
    probe = next;
  }
  return end;
}

/** The end of the occurrence of `window` that holds `localMs` (it started today or yesterday), if any. */
function windowEndHolding(window: QuietWindow, localMs: number): number | undefined {
  const day = Math.floor(localMs / DAY_MS);
  const length = (window.to - window.from + 1440) % 1440;
  let end: number | undefined;
  for (const start of [day - 1, day]) {
    // 1970-01-01 was a Thursday: Monday-based weekday of a day number
    const weekday = (((start + 3) % 7) + 7) % 7;
    if (window.days && !window.days.includes(weekday)) continue;
    const from = start * DAY_MS + window.from * MINUTE_MS;
    const to = from + length * MINUTE_MS;
    if (localMs >= from && localMs < to && (end === undefined || to > end)) end = to;
  }
  return end;
}

/** Whether `instant` is inside quiet hours in `zone`. */
export function isQuiet(windows: readonly QuietWindow[], zone: string, instant: number): boolean {
  return windows.length > 0 && quietAtLocal(windows, instant + zoneOffsetMs(zone, instant));
}

/**
 * The earliest instant ≥ `instant` that is not inside quiet hours in `zone`; undefined when `instant` itself
 * is not. Exact to the millisecond across offset changes: within one offset the stretch ends where its local
 * end is; where the offset changes first, the search goes on from that instant (a repeated hour can take
 * the clock back out of a window, a skipped one past its end).
 */
export function eligibleAt(windows: readonly QuietWindow[], zone: string, instant: number): number | undefined {
  if (windows.length === 0) return undefined;
  let t = instant;
  for (let step = 0; step < 64; step++) {
    const offset = zoneOffsetMs(zone, t);
    const end = quietEndAtLocal(windows, t + offset);
    if (end === undefined) return t === instant ? undefined : t;
    const candidate = end - offset;
    const change = firstOffsetChange(zone, t, candidate, offset);
    if (change === undefined) return candidate;
    t = change;
  }
  throw new Error(`no end of quiet hours found in ${zone} after ${instant}`);
}

/** The first instant in (from, to] where the zone's offset is no longer `offset`; undefined if none. */
function firstOffsetChange(zone: string, from: number, to: number, offset: number): number | undefined {
  if (to - from > MAX_QUIET_MS) throw new Error(`a quiet stretch longer than ${MAX_QUIET_MS} ms`);
  // offsets change at most a few times a year: probe every 6 hours, then bisect to the millisecond
  const STEP = 6 * 3_600_000;
  let low = from;
  for (let probe = Math.min(from + STEP, to); ; probe = Math.min(probe + STEP, to)) {
    if (zoneOffsetMs(zone, probe) !== offset) {
      let high = probe;
      while (high - low > 1) {
        const mid = low + Math.floor((high - low) / 2);
        if (zoneOffsetMs(zone, mid) === offset) low = mid;
        else high = mid;
      }
      return high;
    }
    if (probe >= to) return undefined;
    low = probe;
  }
}
