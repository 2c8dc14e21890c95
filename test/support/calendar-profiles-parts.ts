// Batches that need more calendar profiles than a script call numbers (256, decision 0200): 8 segments with a
// calendar day cap, users in a zone of each distinct UTC offset, and a reference that decides the same users
// one segment at a time, a capper each (so it never shares a numbering, never reaches the parts path).
import { RoaringBitmap32 } from "roaring-wasm";
import type { CampaignBatchInput } from "../../functions/core/capping/campaign-batch.ts";
import type { CapStore } from "../../functions/core/capping/cap-sends-script.ts";
import { Capper, type CapperOptions } from "../../functions/core/capping/capper.ts";
import type { CapBatchResult, CapDecision, ZoneTotals } from "../../functions/core/capping/decisions.ts";
import { ZoneIndex } from "../../functions/core/capping/segment-index.ts";
import { fixedClock } from "../../functions/core/shared/clock.ts";
import { uniqueNamespace } from "./cluster.ts";
import { rulesOf } from "./rules.ts";

export const AT = Date.UTC(2026, 9, 20, 12, 0, 0);
export const SEGMENTS = 8;
export const MINUTE = 60_000;

/** One zone per distinct UTC offset at AT (about 38): each gives a day of its own. */
function zonesOfDistinctOffsets(): string[] {
  const byOffset = new Map<string, string>();
  for (const zone of Intl.supportedValuesOf("timeZone")) {
    const offset = new Intl.DateTimeFormat("en", { timeZone: zone, timeZoneName: "longOffset" })
      .formatToParts(AT)
      .find((part) => part.type === "timeZoneName")?.value as string;
    if (!byOffset.has(offset)) byOffset.set(offset, zone);
  }
  return [...byOffset.values()];
}

export const zones = zonesOfDistinctOffsets();
/** User u: segment u % SEGMENTS, zone floor(u / SEGMENTS) % zones, two users of each pair. */
export const USERS = SEGMENTS * zones.length * 2;
export const userIds = Array.from({ length: USERS }, (_, u) => u);
export const segmentOfUser = (u: number) => u % SEGMENTS;
export const zoneOfUser = (u: number) => Math.floor(u / SEGMENTS) % zones.length;

export interface Shape {
  caps?: unknown[];
  quiet?: boolean;
  /** Page writes of the capper (hot records, compact classes), the same for both. */
  writes?: Pick<CapperOptions, "hotRecords" | "compactClasses">;
  /** The user IDs the segments and zones hold (default userIds), each by segmentOfUser and zoneOfUser. */
  ids?: readonly number[];
  /** A segment's own quiet hours (by channel), by its number. */
  quietOf?: (segment: number) => unknown;
}

export function rulesFor({ caps = [{ window: "day", max: 1 }], quiet = false, ids = userIds, quietOf }: Shape) {
  const members: Record<string, number[]> = {};
  for (let s = 0; s < SEGMENTS; s++) members[`s${s}`] = ids.filter((u) => segmentOfUser(u) === s);
  const rules = rulesOf(
    {
      version: "hostile.1",
      channels: ["push"],
      segments: Array.from({ length: SEGMENTS }, (_, s) => ({
        name: `s${s}`,
        bitmap: `segments/s${s}.roaring`,
        caps: { push: caps },
        ...(quietOf?.(s) ? { quietHours: quietOf(s) } : {}),
      })),
      default: { name: "rest", caps: { push: caps } },
      zones,
      ...(quiet ? { quietHours: { push: [{ from: "22:00", to: "08:00" }] } } : {}),
    },
    members,
  );
  const index = new ZoneIndex(
    zones.map((_, z) => new RoaringBitmap32(ids.filter((u) => zoneOfUser(u) === z))),
    zones,
  );
  return { ...rules, zones: index };
}

/** Two cappers on one namespace: `whole` decides batches whole, `apart` one segment at a time (a capper each). */
export function stacks(redis: CapStore, shape: Shape, store: CapStore = redis) {
  const rules = rulesFor(shape);
  const clock = fixedClock(AT);
  const namespace = uniqueNamespace();
  const make = (ns: string, s: CapStore = store) =>
    new Capper({ store: s, rules: () => rules, clock, namespace: ns, ...shape.writes });
  const gate = make(namespace);
  const refNamespace = uniqueNamespace();
  const apart = async (batch: CampaignBatchInput & { userIds: number[] }) => {
    const results: CapBatchResult[] = [];
    const decisions = new Array<CapDecision>(batch.userIds.length);
    for (let s = 0; s < SEGMENTS; s++) {
      const positions = batch.userIds.flatMap((u, i) => (segmentOfUser(u) === s ? [i] : []));
      if (positions.length === 0) continue;
      const result = await make(refNamespace, redis).capBatch({
        ...batch,
        userIds: positions.map((i) => batch.userIds[i] as number),
      });
      positions.forEach((i, k) => {
        decisions[i] = result.decisions[k] as CapDecision;
      });
      results.push(result);
    }
    return { ...summed(results), decisions };
  };
  return { gate, clock, namespace, make, apart, refNamespace, rules };
}

/** The figures of results of disjoint segments, summed as the contract states them. */
export function summed(results: CapBatchResult[]): Omit<CapBatchResult, "decisions"> {
  const totals = Object.assign({}, ...results.map((r) => r.totals));
  const out: Omit<CapBatchResult, "decisions"> = {
    at: (results[0] as CapBatchResult).at,
    policyVersion: (results[0] as CapBatchResult).policyVersion,
    totals,
  };
  const held = results.flatMap((r) => (r.held ? [r.held] : []));
  if (held.length > 0) {
    const zonesSum: Record<string, ZoneTotals> = {};
    const groups = new Map<number, number[]>();
    for (const h of held) {
      for (const [zone, z] of Object.entries(h.zones)) {
        zonesSum[zone] ??= { quiet: 0, deferred: 0, dropped: 0 };
        const sum = zonesSum[zone];
        sum.quiet += z.quiet;
        sum.deferred += z.deferred;
        sum.dropped += z.dropped;
      }
      for (const g of h.deferred) groups.set(g.eligibleAt, [...(groups.get(g.eligibleAt) ?? []), ...g.userIds]);
    }
    out.held = {
      judgedAt: (held[0] as NonNullable<CapBatchResult["held"]>).judgedAt,
      zones: zonesSum,
      deferred: [...groups]
        .sort(([a], [b]) => a - b)
        .map(([eligibleAt, ids]) => ({ eligibleAt, userIds: ids.sort((a, b) => a - b) })),
    };
  }
  return out;
}

/** A fixed shuffle (LCG), so a failure replays. */
export function shuffled<T>(items: readonly T[], seed = 7): T[] {
  const out = [...items];
  let x = seed;
  for (let i = out.length - 1; i > 0; i--) {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    const k = x % (i + 1);
    [out[i], out[k]] = [out[k] as T, out[i] as T];
  }
  return out;
}
