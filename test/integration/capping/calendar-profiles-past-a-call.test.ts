// A batch whose users' segments and zones need more calendar profiles than a script call numbers (256): 8
// segments with a calendar day cap, users in a zone of each distinct UTC offset. Valid at every documented
// maximum (64 segments, 512 zones), so it is decided like any batch: exactly, each user once.
import { RoaringBitmap32 } from "roaring-wasm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import type { CapBatchResult } from "../../../functions/core/capping/decisions.ts";
import { ZoneIndex } from "../../../functions/core/capping/segment-index.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import {
  AT,
  SEGMENTS,
  segmentOfUser,
  USERS,
  userIds,
  zoneOfUser,
  zones,
} from "../../support/calendar-profiles-parts.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { rulesOf } from "../../support/rules.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

function capper(namespace = uniqueNamespace()) {
  const members: Record<string, number[]> = {};
  for (let s = 0; s < SEGMENTS; s++) members[`s${s}`] = userIds.filter((u) => segmentOfUser(u) === s);
  const rules = rulesOf(
    {
      version: "profiles.1",
      channels: ["push"],
      segments: Array.from({ length: SEGMENTS }, (_, s) => ({
        name: `s${s}`,
        bitmap: `segments/s${s}.roaring`,
        caps: { push: [{ window: "day", max: 1 }] },
      })),
      default: { name: "rest", caps: { push: [{ window: "day", max: 1 }] } },
      zones,
    },
    members,
  );
  const index = new ZoneIndex(
    zones.map((_, z) => new RoaringBitmap32(userIds.filter((u) => zoneOfUser(u) === z))),
    zones,
  );
  const clock = fixedClock(AT);
  const gate = new Capper({
    store: new RedisCapStore(cluster),
    rules: () => ({ ...rules, zones: index }),
    clock,
    namespace,
  });
  return { gate, clock, namespace };
}

const kinds = (result: CapBatchResult) => result.decisions.map((d) => `${d.userId}:${d.decision}`);

describe("a batch needing more calendar profiles than a call numbers", () => {
  it("has more segment and zone pairs than 256 (the case is real)", () => {
    expect(SEGMENTS * zones.length).toBeGreaterThan(256);
  });

  it("is decided whole: every user allowed once, then capped by the day, in input order", async () => {
    const { gate, clock } = capper();
    // input order reversed, one user repeated: its later occurrence is the duplicate
    const input = [...userIds].reverse();
    input.splice(100, 0, 17);
    const repeat = input.lastIndexOf(17);
    const first = await gate.capBatch({ campaignId: "c1", channel: "push", userIds: input, at: AT });
    expect(first.decisions.map((d) => d.userId)).toEqual(input);
    const expected = input.map((u, i) => `${u}:${i === repeat ? "duplicate" : "allowed"}`);
    expect(kinds(first)).toEqual(expected);
    const allowed = Object.values(first.totals).reduce((sum, t) => sum + t.allowed, 0);
    expect(allowed).toBe(USERS);
    expect(first.totals.s3?.allowed).toBe(USERS / SEGMENTS);
    expect(first.totals[`s${17 % SEGMENTS}`]?.duplicate).toBe(1);

    const again = await gate.capBatch({ campaignId: "c1", channel: "push", userIds, at: AT });
    expect(again.decisions.every((d) => d.decision === "duplicate")).toBe(true);
    clock.set(AT + 60_000);
    const second = await gate.capBatch({ campaignId: "c2", channel: "push", userIds, at: AT + 60_000 });
    expect(second.decisions.every((d) => d.decision === "capped")).toBe(true);
    expect(second.totals.s0?.cappedBy).toEqual({ "push:day": USERS / SEGMENTS });
  });

  it("decides as the same users split into batches of one segment each", async () => {
    const whole = capper();
    const split = capper();
    const step = async (campaignId: string, at: number) => {
      whole.clock.set(at);
      const together = await whole.gate.capBatch({ campaignId, channel: "push", userIds, at });
      const apart = new Map<number, string>();
      for (let s = 0; s < SEGMENTS; s++) {
        const ids = userIds.filter((u) => segmentOfUser(u) === s);
        // a capper of its own for each segment's batch: one capper's batches at one instant share a numbering,
        // and the later ones would be decided in parts too
        const own = capper(split.namespace);
        own.clock.set(at);
        const result = await own.gate.capBatch({ campaignId, channel: "push", userIds: ids, at });
        for (const d of result.decisions) apart.set(d.userId, `${d.userId}:${d.decision}`);
      }
      expect(kinds(together)).toEqual(userIds.map((u) => apart.get(u)));
      return together;
    };
    const localDate = (zone: string, at: number) => new Intl.DateTimeFormat("en-CA", { timeZone: zone }).format(at);
    const lastAllowed = new Map<number, number>();
    // 13 h apart: a new local day in some zones, not in others; allowed only on a new day of the user's zone
    for (const [k, at] of [AT, AT + 13 * 3_600_000, AT + 26 * 3_600_000].entries()) {
      const together = await step(`c${k}`, at);
      // past the first step some zones turned a day and some did not: both answers occur
      if (k > 0) expect(new Set(together.decisions.map((d) => d.decision))).toEqual(new Set(["allowed", "capped"]));
      for (const d of together.decisions) {
        const zone = zones[zoneOfUser(d.userId)] as string;
        const before = lastAllowed.get(d.userId);
        const newDay = before === undefined || localDate(zone, before) !== localDate(zone, at);
        expect(d.decision, `user ${d.userId} in ${zone}`).toBe(newDay ? "allowed" : "capped");
        if (d.decision === "allowed") lastAllowed.set(d.userId, at);
      }
    }
  });
});
