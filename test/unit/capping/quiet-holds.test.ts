// Which sends of a batch quiet hours hold: users' zones are looked up only when some segment × zone pair is
// quiet at the batch's instant, and then once for the whole batch.
import { RoaringBitmap32 } from "roaring-wasm";
import { afterEach, describe, expect, it, vi } from "vitest";
import { parsePolicy } from "../../../functions/core/capping/policy.ts";
import { HELD_DEFERRED, HELD_QUIET, NOT_HELD, quietHolds } from "../../../functions/core/capping/quiet-holds.ts";
import { ZoneIndex } from "../../../functions/core/capping/segment-index.ts";

const policy = parsePolicy({
  version: "v",
  channels: ["push"],
  defaultZone: "UTC",
  zones: ["Asia/Tokyo"],
  quietHours: { push: [{ from: "22:00", to: "07:00" }] },
  segments: [{ name: "vip", bitmap: "segments/vip.roaring", caps: {} }],
  default: { name: "rest", caps: {} },
});
const sortedIds = Uint32Array.of(1, 2, 3, 4);
/** Every user in the default segment (policy.segments' last). */
const segmentOf = new Uint8Array(4).fill(1);
const tokyo = () => new ZoneIndex([new RoaringBitmap32([2, 4])], ["Asia/Tokyo"]);
// pinned: the instants quietHolds is given. 2026-06-01 12:00 UTC is 21:00 in Tokyo (nobody quiet), 13:30 UTC 22:30
const outsideEveryNight = Date.UTC(2026, 5, 1, 12, 0);
const tokyoNight = Date.UTC(2026, 5, 1, 13, 30);
const tokyoMorning = Date.UTC(2026, 5, 1, 22, 0);

afterEach(() => vi.restoreAllMocks());

describe("quietHolds", () => {
  it("holds nothing and looks up no user's zone when no segment × zone pair is quiet", () => {
    const zones = tokyo();
    const lookup = vi.spyOn(zones, "resolveSorted");
    const held = quietHolds({
      policy,
      zones,
      channel: "push",
      defer: undefined,
      instant: outsideEveryNight,
      sortedIds,
      segmentOf,
    });
    expect(held).toBeUndefined();
    expect(lookup).not.toHaveBeenCalled();
  });

  it("looks the zones up once when one pair is quiet, and holds only that zone's users until its morning", () => {
    const zones = tokyo();
    const lookup = vi.spyOn(zones, "resolveSorted");
    const held = quietHolds({
      policy,
      zones,
      channel: "push",
      defer: { maxMs: 86_400_000 },
      instant: tokyoNight,
      sortedIds,
      segmentOf,
    });
    expect(lookup).toHaveBeenCalledTimes(1);
    expect(held?.count).toBe(2);
    expect([...(held?.kinds ?? [])]).toEqual([NOT_HELD, HELD_DEFERRED, NOT_HELD, HELD_DEFERRED]);
    expect([...(held?.eligibleAt ?? [])]).toEqual([Number.NaN, tokyoMorning, Number.NaN, tokyoMorning]);
    expect(held?.zoneNames[held.zoneOf[1] as number]).toBe("Asia/Tokyo");
  });

  it("without defer a held send is quiet (dropped, not deferred)", () => {
    const held = quietHolds({
      policy,
      zones: tokyo(),
      channel: "push",
      defer: undefined,
      instant: tokyoNight,
      sortedIds,
      segmentOf,
    });
    expect([...(held?.kinds ?? [])]).toEqual([NOT_HELD, HELD_QUIET, NOT_HELD, HELD_QUIET]);
  });
});
