// Small policies and segment sets for tests, built with the same parsers production uses.
import { RoaringBitmap32 } from "roaring-wasm";
import { type Policy, parsePolicy } from "../../functions/core/capping/policy.ts";
import type { Rules } from "../../functions/core/capping/rules-source.ts";
import { SegmentIndex } from "../../functions/core/capping/segment-index.ts";

export function rulesOf(policy: unknown, members: Record<string, number[]> = {}): Rules & { policy: Policy } {
  const parsed = parsePolicy(policy);
  const bitmaps = parsed.segments
    .filter((segment) => segment.bitmap !== undefined)
    .map((segment) => new RoaringBitmap32(members[segment.name] ?? []));
  return { policy: parsed, segments: new SegmentIndex(bitmaps) };
}

/** One segment "new" (users listed) and a default; caps given per channel. */
export function simplePolicy(caps: Record<string, { window: string; max: number }[]>, defaultCaps = caps) {
  return {
    version: "test.1",
    channels: ["email", "push", "sms"],
    segments: [{ name: "new", bitmap: "segments/new.roaring", caps }],
    default: { name: "unsegmented", caps: defaultCaps },
  };
}

export const HOUR = 3_600_000;
export const DAY = 24 * HOUR;
/** A fixed Monday 00:00 UTC, far from any real clock. */
// pinned: the `now` of the scripts and clocks the tests give it to, never compared with the calendar
export const T0 = Date.UTC(2026, 10, 2);

/** The policy of docs/api.md ("new" with push, email and "*" caps; a default of 2 a week). */
export function designPolicy() {
  return {
    version: "2026-11-22.1",
    channels: ["email", "push", "sms", "inapp"],
    segments: [
      {
        name: "new",
        bitmap: "segments/new.roaring",
        caps: {
          push: [
            { window: "1d", max: 2 },
            { window: "7d", max: 5 },
          ],
          email: [
            { window: "1d", max: 1 },
            { window: "7d", max: 3 },
          ],
          // 1 of 2 a day kept for transactional sends (password resets, order updates)
          sms: [{ window: "1d", max: 2, reserve: { transactional: 1 } }],
          // one a calendar day in the user's zone (Europe/Berlin, the default zone)
          inapp: [{ window: "day", max: 1 }],
          "*": [{ window: "7d", max: 6 }],
        } as Record<string, { window: string; max: number; reserve?: Record<string, number> }[]>,
      },
    ],
    default: {
      name: "unsegmented",
      caps: { "*": [{ window: "7d", max: 2 }] } as Record<string, { window: string; max: number }[]>,
    },
    defaultZone: "Europe/Berlin",
    quietHours: { inapp: [{ from: "21:00", to: "08:00" }] },
  };
}
