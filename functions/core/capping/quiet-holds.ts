// Which sends of a batch quiet hours hold back, before anything is counted: one eligibleAt per segment and
// zone (not per user), then, only when one of them is quiet, each user's zone (one intersection per published
// zone). A held send is deferred to its eligibleAt when the campaign asks for it and the wait is within its
// bound, dropped past the bound, and dropped ("quiet") when the campaign does not defer.
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
  const zoneNames = [...policy.zones, policy.defaultZone];
  const zoneCount = zoneNames.length;
  // eligibleAt by segment × zone, -1 not quiet: when no pair is quiet at this instant, no user's zone is
  // looked up (the zone intersections are most of the cost of a batch outside every night)
  const memo = new Float64Array(policy.segments.length * zoneCount);
  let anyQuiet = false;
  for (let segment = 0; segment < policy.segments.length; segment++) {
    const windows = policy.quietFor(segment, channel);
    for (let zone = 0; zone < zoneCount; zone++) {
      const at = windows.length === 0 ? -1 : (eligibleAt(windows, zoneNames[zone] as string, instant) ?? -1);
      memo[segment * zoneCount + zone] = at;
      if (at >= 0) anyQuiet = true;
    }
  }
  if (!anyQuiet) return undefined;
  const zoneOf = zones ? zones.resolveSorted(sortedIds) : new Uint16Array(sortedIds.length);
  // without a zone index every user is in the default zone, the last name
  if (!zones) zoneOf.fill(policy.zones.length);
  const kinds = new Uint8Array(sortedIds.length);
  const eligible = new Float64Array(sortedIds.length).fill(Number.NaN);
  const deadline = defer ? (defer.since ?? instant) + defer.maxMs : undefined;
  let count = 0;
  for (let j = 0; j < sortedIds.length; j++) {
    const at = memo[(segmentOf[j] as number) * zoneCount + (zoneOf[j] as number)] as number;
    if (at < 0) continue;
    count++;
    eligible[j] = at;
    kinds[j] = deadline === undefined ? HELD_QUIET : at <= deadline ? HELD_DEFERRED : HELD_DROPPED;
  }
  return count === 0 ? undefined : { kinds, eligibleAt: eligible, zoneOf, zoneNames, count };
}
