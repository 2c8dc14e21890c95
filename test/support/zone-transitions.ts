// The instants at which a zone's UTC offset changes in 2026, for tests that aim at DST changes.
import { zoneOffsetMs } from "../../functions/core/capping/quiet-hours.ts";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
// pinned: the year the zone data is searched, not the calendar the tests run on
export const YEAR_START = Date.UTC(2026, 0, 1);

const transitions = new Map<string, number[]>();
/** The instants of 2026 at which `zone`'s offset changes (to 6 hours, then to the second). */
export function transitionsOf(zone: string): number[] {
  const known = transitions.get(zone);
  if (known) return known;
  const found: number[] = [];
  transitions.set(zone, found);
  for (let t = YEAR_START; t < YEAR_START + 365 * DAY; t += 6 * HOUR) {
    if (zoneOffsetMs(zone, t) === zoneOffsetMs(zone, t + 6 * HOUR)) continue;
    let low = t;
    let high = t + 6 * HOUR;
    while (high - low > 1000) {
      const middle = low + Math.floor((high - low) / 2000) * 1000;
      if (zoneOffsetMs(zone, middle) === zoneOffsetMs(zone, t)) low = middle;
      else high = middle;
    }
    found.push(high);
  }
  return found;
}
