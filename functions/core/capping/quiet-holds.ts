// Which sends of a batch quiet hours hold back, before anything is counted: each user's zone (one
// intersection per published zone), then one eligibleAt per segment and zone present, not per user. A held
// send is deferred to its eligibleAt when the campaign asks for it and the wait is within its bound, dropped
// past the bound, and dropped ("quiet") when the campaign does not defer.
import type { CampaignBatch } from "./campaign-batch.ts";
import type { Policy } from "./policy.ts";
import { eligibleAt } from "./quiet-hours.ts";
import type { ZoneIndex } from "./segment-index.ts";

export const NOT_HELD = 0;
export const HELD_QUIET = 1;
export const HELD_DEFERRED = 2;
export const HELD_DROPPED = 3;
export const HELD_NAMES = ["", "quiet", "deferred", "dropped"] as const;

export interface QuietHolds {
  /** Per sorted user: NOT_HELD or how it is held. */
  kinds: Uint8Array;
  /** Per sorted user: its eligibleAt when held (NaN otherwise). */
  eligibleAt: Float64Array;
  /** Per sorted user: its zone number (into `zoneNames`). */
  zoneOf: Uint16Array;
  zoneNames: readonly string[];
  /** How many users are held. */
  count: number;
}

/**
 * The holds of a batch decided at `instant` (the later of `at` and the clock: a send is delivered no earlier
 * than now). Undefined when no send is held.
 */
export function quietHolds(request: {
  policy: Policy;
  zones: ZoneIndex | undefined;
  channel: string;
  defer: CampaignBatch["defer"];
  instant: number;
  sortedIds: Uint32Array;
  segmentOf: Uint8Array;
}): QuietHolds | undefined {
  const { policy, zones, channel, defer, instant, sortedIds, segmentOf } = request;
  const zoneOf = zones ? zones.resolveSorted(sortedIds) : new Uint16Array(sortedIds.length);
  const zoneNames = [...policy.zones, policy.defaultZone];
  // without a zone index every user is in the default zone, the last name
  if (!zones) zoneOf.fill(policy.zones.length);
  const zoneCount = zoneNames.length;
  // eligibleAt by segment × zone: NaN not worked out yet, -1 not quiet
  const memo = new Float64Array(policy.segments.length * zoneCount).fill(Number.NaN);
  const kinds = new Uint8Array(sortedIds.length);
  const eligible = new Float64Array(sortedIds.length).fill(Number.NaN);
  const deadline = defer ? (defer.since ?? instant) + defer.maxMs : undefined;
  let count = 0;
  for (let j = 0; j < sortedIds.length; j++) {
    const cell = (segmentOf[j] as number) * zoneCount + (zoneOf[j] as number);
    let at = memo[cell] as number;
    if (Number.isNaN(at)) {
      const windows = policy.quietFor(segmentOf[j] as number, channel);
      at = eligibleAt(windows, zoneNames[zoneOf[j] as number] as string, instant) ?? -1;
      memo[cell] = at;
    }
    if (at < 0) continue;
    count++;
    eligible[j] = at;
    kinds[j] = deadline === undefined ? HELD_QUIET : at <= deadline ? HELD_DEFERRED : HELD_DROPPED;
  }
  return count === 0 ? undefined : { kinds, eligibleAt: eligible, zoneOf, zoneNames, count };
}
