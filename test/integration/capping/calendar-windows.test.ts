// Calendar windows on the real cluster: caps of a day, a week or a month of each user's zone beside rolling
// caps, against a reference model written from the contract (test/support/calendar-model.ts), over random
// IANA zones near their DST changes, with backfilled and skewed `at`, on the page-block path (16+ users of a
// page in a call), the record path and /v1/frequency checks.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { WEEK_STARTS } from "../../../functions/core/capping/calendar-windows.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import type { CapDecision } from "../../../functions/core/capping/decisions.ts";
import { zoneOffsetMs } from "../../../functions/core/capping/quiet-hours.ts";
import { buildSegments } from "../../../functions/core/capping/segment-builder.ts";
import { parseBitmap, ZoneIndex } from "../../../functions/core/capping/segment-index.ts";
import { fixedClock, MAX_FUTURE_MS } from "../../../functions/core/shared/clock.ts";
import {
  type CalendarDecision,
  CalendarModel,
  type ModelCalendarCap,
  modelPeriod,
} from "../../support/calendar-model.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { rulesOf } from "../../support/rules.ts";

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
const ZONES = [...Intl.supportedValuesOf("timeZone"), "UTC"];
const YEAR_START = Date.UTC(2026, 0, 1);

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

/** Users 0..19 live in the first zone, 20..29 in the second, 30..39 and 7,000,000 in the default zone. */
const zoneOfUser = (user: number, zones: readonly string[], defaultZone: string): string =>
  user < 20 ? (zones[0] as string) : user < 30 ? (zones[1] as string) : defaultZone;

function stack(
  caps: ModelCalendarCap[],
  zones: [string, string],
  defaultZone: string,
  start: number,
  weekStarts: string,
) {
  const rules = rulesOf({
    version: "calendar.1",
    channels: ["push", "email"],
    segments: [],
    default: { name: "everyone", caps: { push: caps } },
    defaultZone,
    zones,
    weekStarts,
  });
  const bitmaps = buildSegments([
    { name: "a", userIds: Array.from({ length: 20 }, (_, i) => i) },
    { name: "b", userIds: Array.from({ length: 10 }, (_, i) => 20 + i) },
  ]);
  const index = new ZoneIndex(
    [parseBitmap(bitmaps.get("a") as Uint8Array, "a"), parseBitmap(bitmaps.get("b") as Uint8Array, "b")],
    zones,
  );
  const clock = fixedClock(start);
  const capper = new Capper({
    store: new RedisCapStore(cluster),
    rules: () => ({ ...rules, zones: index }),
    clock,
    namespace: uniqueNamespace(),
  });
  return { capper, clock, caps: rules.policy.capsFor(rules.policy.defaultSegment, "push") };
}

/** The first instant of 2026 at which `zone`'s offset changes (to the second), if it does. */
function firstTransition(zone: string): number | undefined {
  for (let t = YEAR_START; t < YEAR_START + 365 * DAY; t += 6 * HOUR) {
    if (zoneOffsetMs(zone, t) === zoneOffsetMs(zone, t + 6 * HOUR)) continue;
    let low = t;
    let high = t + 6 * HOUR;
    while (high - low > 1000) {
      const middle = low + Math.floor((high - low) / 2000) * 1000;
      if (zoneOffsetMs(zone, middle) === zoneOffsetMs(zone, t)) low = middle;
      else high = middle;
    }
    return high;
  }
  return undefined;
}

const zoneArb = fc.constantFrom(...ZONES, "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kathmandu");
const capArb: fc.Arbitrary<ModelCalendarCap> = fc.oneof(
  fc.record({ window: fc.constantFrom("day", "week", "month"), max: fc.integer({ min: 1, max: 3 }) }),
  fc.record({ window: fc.constantFrom("6h", "1d"), max: fc.integer({ min: 2, max: 4 }) }),
);
const stepArb = fc.record({
  advanceMs: fc.integer({ min: 0, max: 10 * HOUR }),
  // up to 5 minutes ahead (clock skew) and 26 hours behind (a backfill into yesterday; every policy here has
  // a calendar cap, so the backfill bound is at least a day's 26 hours)
  skewMs: fc.oneof(fc.integer({ min: -26 * HOUR, max: MAX_FUTURE_MS - 1 }), fc.integer({ min: -MINUTE, max: MINUTE })),
  campaign: fc.constantFrom("c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8"),
  users: fc.uniqueArray(fc.oneof(fc.integer({ min: 0, max: 39 }), fc.constant(7_000_000)), {
    minLength: 1,
    maxLength: 40,
  }),
  check: fc.boolean(),
});

/** The engine's decision in the model's terms (the cap by its position among the segment's push caps). */
function asModel(decision: CapDecision, caps: readonly unknown[]): CalendarDecision {
  if (decision.decision === "capped") return { capped: caps.indexOf(decision.cap) };
  return decision.decision as CalendarDecision;
}

describe("calendar windows against the reference model", () => {
  it("decides like the model, reports the model's eligible time, and no calendar period holds more than max", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.tuple(zoneArb, zoneArb, zoneArb).filter(([a, b]) => a !== b),
        fc
          .array(capArb, { minLength: 1, maxLength: 3 })
          .filter((caps) => caps.some((cap) => ["day", "week", "month"].includes(cap.window))),
        fc.constantFrom(...WEEK_STARTS),
        fc.integer({ min: -36 * HOUR, max: 12 * HOUR }),
        fc.integer({ min: YEAR_START, max: YEAR_START + 360 * DAY }),
        fc.array(stepArb, { minLength: 1, maxLength: 14 }),
        async ([zoneA, zoneB, defaultZone], capDocs, weekStarts, nearTransition, anywhere, steps) => {
          // start near the first zone's DST change when it has one: its 23- or 25-hour day is in the run
          const transition = firstTransition(zoneA);
          const start = transition === undefined ? anywhere : transition + nearTransition;
          const { capper, clock, caps } = stack(capDocs, [zoneA, zoneB], defaultZone, start, weekStarts);
          const model = new CalendarModel(capDocs, weekStarts);
          for (const step of steps) {
            clock.advance(step.advanceMs);
            const at = clock.now() + step.skewMs;
            if (step.check) {
              const user = step.users[0] as number;
              const zone = zoneOfUser(user, [zoneA, zoneB], defaultZone);
              const result = await capper.checkUser({ userId: user, channel: "push", at, campaignId: step.campaign });
              const expected = model.apply(user, zone, at, step.campaign);
              expect(typeof expected === "string" ? result.decision : "capped").toBe(result.decision);
              if (result.decision === "capped") {
                const eligible = model.eligibleAt(user, zone, at, 40 * DAY);
                expect(result.retryAfterMs).toBe(eligible === undefined ? undefined : eligible - at);
              }
              result.windows.forEach((window, i) => {
                const cap = capDocs[i] as ModelCalendarCap;
                if (!["day", "week", "month"].includes(cap.window)) return;
                const [from, to] = modelPeriod(zone, cap.window, at, weekStarts);
                const used = model.timesOf(user).filter((t) => t >= from && t < to).length;
                expect(window.used).toBe(used);
                expect(window.resetAt).toBe(used > 0 ? to : at);
              });
              continue;
            }
            const result = await capper.capBatch({
              campaignId: step.campaign,
              channel: "push",
              userIds: step.users,
              at,
            });
            step.users.forEach((user, k) => {
              const expected = model.apply(user, zoneOfUser(user, [zoneA, zoneB], defaultZone), at, step.campaign);
              expect(asModel(result.decisions[k] as CapDecision, caps)).toEqual(expected);
            });
          }
          // no calendar period over max: the counted sends grouped by the period holding each
          for (const user of [...Array.from({ length: 40 }, (_, i) => i), 7_000_000]) {
            const zone = zoneOfUser(user, [zoneA, zoneB], defaultZone);
            const times = model.timesOf(user);
            capDocs.forEach((cap) => {
              if (!["day", "week", "month"].includes(cap.window)) return;
              for (const t of times) {
                const [from, to] = modelPeriod(zone, cap.window, t, weekStarts);
                expect(times.filter((u) => u >= from && u < to).length).toBeLessThanOrEqual(cap.max);
              }
            });
          }
        },
      ),
      { numRuns: 30 },
    );
  });
});
