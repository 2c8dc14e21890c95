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
import { transitionsOf, YEAR_START } from "../../support/zone-transitions.ts";

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
const ZONES = [...Intl.supportedValuesOf("timeZone"), "UTC"];

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
  // the previous step's campaign again (a duplicate for its users), or one of its own: a campaign is sent
  // again within 10 hours, well inside the retention that recognises it
  again: fc.boolean(),
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
          const transition = transitionsOf(zoneA)[0];
          const start = transition === undefined ? anywhere : transition + nearTransition;
          const { capper, clock, caps } = stack(capDocs, [zoneA, zoneB], defaultZone, start, weekStarts);
          const model = new CalendarModel(capDocs, weekStarts);
          for (const [i, step] of steps.entries()) {
            clock.advance(step.advanceMs);
            const at = clock.now() + step.skewMs;
            const campaign = `s${step.again && i > 0 ? i - 1 : i}`;
            if (step.check) {
              const user = step.users[0] as number;
              const zone = zoneOfUser(user, [zoneA, zoneB], defaultZone);
              const result = await capper.checkUser({ userId: user, channel: "push", at, campaignId: campaign });
              const expected = model.apply(user, zone, at, campaign);
              expect(result.decision).toBe(typeof expected === "string" ? expected : "capped");
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
              campaignId: campaign,
              channel: "push",
              userIds: step.users,
              at,
            });
            step.users.forEach((user, k) => {
              const expected = model.apply(user, zoneOfUser(user, [zoneA, zoneB], defaultZone), at, campaign);
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
      // a run takes about a second; shrinking a 14-step case takes minutes, so the first counterexample is shown
      { numRuns: 100, endOnFailure: true },
    );
  });
});

/** A capper whose users all live in `zone` (the policy's default zone), with push caps `caps`. */
function inZone(zone: string, caps: ModelCalendarCap[], start: number, weekStarts?: string) {
  const rules = rulesOf({
    version: "calendar.2",
    channels: ["push", "email"],
    segments: [],
    default: { name: "everyone", caps: { push: caps } },
    defaultZone: zone,
    ...(weekStarts ? { weekStarts } : {}),
  });
  const clock = fixedClock(start);
  const capper = new Capper({
    store: new RedisCapStore(cluster),
    rules: () => rules,
    clock,
    namespace: uniqueNamespace(),
  });
  let campaign = 0;
  /** One send of `users` at `at` (the clock set to `now`, default `at`), as a batch of its own campaign. */
  const send = async (at: number, users: number[] = [1], now = at) => {
    clock.set(now);
    const result = await capper.capBatch({ campaignId: `c${++campaign}`, channel: "push", userIds: users, at });
    return result.decisions.map((decision) => decision.decision);
  };
  const check = (at: number) => {
    clock.set(at);
    return capper.checkUser({ userId: 1, channel: "push", at, consume: false });
  };
  return { send, check, clock };
}

// pinned: every instant below is handed to a fixed clock (inZone()), never compared with the calendar
describe("calendar windows, hostile but valid", () => {
  it("counts a send at 23:59:59.999 and one at 00:00 local in different days, and names midnight as the retry", async () => {
    // Europe/Berlin in December: UTC+1, so local midnight of Dec 3 is 23:00 UTC on Dec 2
    const midnight = Date.UTC(2026, 11, 2, 23);
    const { send, check } = inZone("Europe/Berlin", [{ window: "day", max: 1 }], midnight - DAY);
    expect(await send(midnight - 1)).toEqual(["allowed"]);
    expect(await send(midnight)).toEqual(["allowed"]);
    expect(await send(midnight + 1)).toEqual(["capped"]);
    const report = await check(midnight + HOUR);
    expect(report).toMatchObject({ allowed: false, retryAfterMs: DAY - HOUR });
    expect(report.windows[0]).toMatchObject({ window: "day", used: 1, remaining: 0, resetAt: midnight + DAY });
  });

  it("makes America/New_York's 2026-03-08 a day of 23 hours and 2026-11-01 one of 25", async () => {
    // spring: local midnight is 05:00 UTC, the next one 04:00 UTC (EDT)
    const spring = Date.UTC(2026, 2, 8, 5);
    const a = inZone("America/New_York", [{ window: "day", max: 1 }], spring);
    expect(await a.send(spring + 23 * HOUR - 1)).toEqual(["allowed"]);
    expect(await a.send(spring + 23 * HOUR)).toEqual(["allowed"]);
    expect((await a.check(spring + 23 * HOUR + MINUTE)).windows[0]?.resetAt).toBe(spring + 47 * HOUR);
    // fall: local midnight is 04:00 UTC (EDT), the next one 05:00 UTC the day after (EST): 25 hours
    const fall = Date.UTC(2026, 10, 1, 4);
    const b = inZone("America/New_York", [{ window: "day", max: 1 }], fall);
    expect(await b.send(fall)).toEqual(["allowed"]);
    expect(await b.send(fall + 25 * HOUR - 1)).toEqual(["capped"]);
    expect(await b.send(fall + 25 * HOUR)).toEqual(["allowed"]);
  });

  it("follows Asia/Kathmandu's 45-minute offset (UTC+5:45)", async () => {
    const midnight = Date.UTC(2026, 10, 1, 18, 15);
    const { send, check } = inZone("Asia/Kathmandu", [{ window: "day", max: 1 }], midnight - HOUR);
    expect(await send(midnight - HOUR)).toEqual(["allowed"]);
    expect(await send(midnight - 1)).toEqual(["capped"]);
    expect((await check(midnight - 1)).retryAfterMs).toBe(1);
    expect(await send(midnight)).toEqual(["allowed"]);
  });

  it("refuses a send backfilled into yesterday's full day, and still allows today's", async () => {
    const midnight = Date.UTC(2026, 11, 2);
    const { send } = inZone("UTC", [{ window: "day", max: 1 }], midnight - 2 * HOUR);
    expect(await send(midnight - 2 * HOUR)).toEqual(["allowed"]);
    // the clock is in today; `at` names yesterday evening, whose day already holds its one send
    expect(await send(midnight - HOUR, [1], midnight + 6 * HOUR)).toEqual(["capped"]);
    expect(await send(midnight + 6 * HOUR)).toEqual(["allowed"]);
  });

  it("turns a week on the policy's first weekday: Sunday, and Monday by default", async () => {
    // Saturday 2026-12-05 23:00 and Sunday 2026-12-06 00:30 in America/Los_Angeles (UTC-8)
    const saturday = Date.UTC(2026, 11, 6, 7);
    const sunday = saturday + 90 * MINUTE;
    const sundayWeeks = inZone("America/Los_Angeles", [{ window: "week", max: 1 }], saturday, "sunday");
    expect(await sundayWeeks.send(saturday)).toEqual(["allowed"]);
    expect(await sundayWeeks.send(sunday)).toEqual(["allowed"]);
    const isoWeeks = inZone("America/Los_Angeles", [{ window: "week", max: 1 }], saturday);
    expect(await isoWeeks.send(saturday)).toEqual(["allowed"]);
    expect(await isoWeeks.send(sunday)).toEqual(["capped"]);
    // the ISO week turns at Monday 00:00 local, 08:00 UTC
    expect((await isoWeeks.check(sunday)).retryAfterMs).toBe(Date.UTC(2026, 11, 7, 8) - sunday);
  });

  it("makes February 28 days and March 31 (UTC)", async () => {
    const { send, check } = inZone("UTC", [{ window: "month", max: 1 }], Date.UTC(2026, 1, 1));
    expect(await send(Date.UTC(2026, 1, 1))).toEqual(["allowed"]);
    expect(await send(Date.UTC(2026, 2, 1) - 1)).toEqual(["capped"]);
    expect(await send(Date.UTC(2026, 2, 1))).toEqual(["allowed"]);
    expect(await send(Date.UTC(2026, 2, 31, 23, 59, 59, 999))).toEqual(["capped"]);
    const report = await check(Date.UTC(2026, 2, 31, 12));
    expect(report.windows[0]).toMatchObject({ used: 1, resetAt: Date.UTC(2026, 3, 1) });
    expect(report.retryAfterMs).toBe(12 * HOUR);
  });

  it("retries at the later of a calendar day's end and a rolling window's release", async () => {
    const midnight = Date.UTC(2026, 11, 3);
    const { send, check } = inZone(
      "UTC",
      [
        { window: "day", max: 1 },
        { window: "1d", max: 1 },
      ],
      midnight - 4 * HOUR,
    );
    expect(await send(midnight - 4 * HOUR)).toEqual(["allowed"]);
    // at 23:00 both refuse: the day turns at midnight, the rolling day releases the send at 20:00 tomorrow
    expect((await check(midnight - HOUR)).retryAfterMs).toBe(DAY - 3 * HOUR);
  });

  it("keeps a calendar cap's reserve for higher priorities: a promotional send is displaced, a transactional one allowed", async () => {
    const midnight = Date.UTC(2026, 11, 3);
    const rules = rulesOf({
      version: "calendar.3",
      channels: ["push"],
      segments: [],
      default: { name: "everyone", caps: { push: [{ window: "day", max: 2, reserve: { transactional: 1 } }] } },
    });
    const clock = fixedClock(midnight - 3 * HOUR);
    const capper = new Capper({
      store: new RedisCapStore(cluster),
      rules: () => rules,
      clock,
      namespace: uniqueNamespace(),
    });
    const send = async (campaignId: string, priority?: "transactional") =>
      (await capper.capBatch({ campaignId, channel: "push", userIds: [1], ...(priority ? { priority } : {}) }))
        .decisions[0]?.decision;
    expect(await send("promo-1")).toBe("allowed");
    expect(await send("promo-2")).toBe("displaced");
    expect(await send("reset", "transactional")).toBe("allowed");
    expect(await send("reset-2", "transactional")).toBe("capped");
    // the next local day has room again
    clock.set(midnight);
    expect(await send("promo-3")).toBe("allowed");
  });

  it("caps a whole page on its block path by each user's day", async () => {
    const midnight = Date.UTC(2026, 11, 3);
    const users = Array.from({ length: 64 }, (_, i) => i);
    const { send } = inZone("UTC", [{ window: "day", max: 2 }], midnight - 3 * HOUR);
    expect(new Set(await send(midnight - 3 * HOUR, users))).toEqual(new Set(["allowed"]));
    expect(new Set(await send(midnight - 2 * HOUR, users))).toEqual(new Set(["allowed"]));
    expect(new Set(await send(midnight - HOUR, users))).toEqual(new Set(["capped"]));
    expect(new Set(await send(midnight, users))).toEqual(new Set(["allowed"]));
  });
});
