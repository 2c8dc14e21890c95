// When a capped send a campaign defers is admitted again: the earliest instant at which every cap admits it
// (the script's retry time, windowsLine() in lua/cap-sends/windows-report.lua), read for the capped users
// only by one peek call per slot after the batch's consuming call, then pushed past quiet hours at that
// instant in the user's zone. Nothing here counts: a capped send was not counted, and a peek writes nothing.
import type { UserWindows, Verdicts } from "./cap-sends-script.ts";
import type { Policy } from "./policy.ts";
import { eligibleAt as quietEnd } from "./quiet-hours.ts";
import type { ZoneIndex } from "./segment-index.ts";

/** Per decided sorted user: when its capped send is admitted again (NaN: not capped, or never admitted). */
export type CappedEligible = Float64Array;

/**
 * The eligible instants of the capped (and displaced) sends among `sortedIds` (the users the script decided,
 * `verdicts` its replies), no earlier than `judgedAt`. `peek` decides the given users in peek mode with their
 * windows (their retry times); it is called once, with the capped users only. Undefined when none is capped.
 */
export async function cappedEligibleAt(request: {
  verdicts: Verdicts;
  sortedIds: Uint32Array;
  segmentOf: Uint8Array;
  /** The script's profile of each user (its segment's, or with calendar caps its segment's in its zone). */
  profileOf: Uint8Array;
  judgedAt: number;
  policy: Policy;
  zones: ZoneIndex | undefined;
  channel: string;
  peek: (sortedIds: Uint32Array, profileOf: Uint8Array) => Promise<Map<number, UserWindows>>;
}): Promise<CappedEligible | undefined> {
  const { verdicts, sortedIds, segmentOf, profileOf, judgedAt, policy, zones, channel } = request;
  // the first occurrence of each capped user (a repeat shares its first occurrence's reply)
  const of: number[] = [];
  for (let v = 0; v < sortedIds.length; v++) {
    if (v > 0 && sortedIds[v] === sortedIds[v - 1]) continue;
    const kind = verdicts.decision(v);
    if (kind === "capped" || kind === "displaced") of.push(v);
  }
  if (of.length === 0) return undefined;
  const ids = Uint32Array.from(of, (v) => sortedIds[v] as number);
  const segments = Uint8Array.from(of, (v) => segmentOf[v] as number);
  const windows = await request.peek(
    ids,
    Uint8Array.from(of, (v) => profileOf[v] as number),
  );
  const quiet = policy.hasQuietHours(channel);
  const zoneNames = [...policy.zones, policy.defaultZone];
  // without a zone index every user is in the default zone, the last name
  const zoneOf = quiet && zones ? zones.resolveSorted(ids) : undefined;
  const eligible = new Float64Array(sortedIds.length).fill(Number.NaN);
  for (let k = 0; k < of.length; k++) {
    const retryAt = windows.get(k)?.retryAt;
    // no retry time: a cap of 0 never admits the send
    if (retryAt === undefined) continue;
    let at = Math.max(retryAt, judgedAt);
    if (quiet) {
      const zone = zoneNames[zoneOf ? (zoneOf[k] as number) : policy.zones.length] as string;
      at = quietEnd(policy.quietFor(segments[k] as number, channel), zone, at) ?? at;
    }
    eligible[of[k] as number] = at;
  }
  return eligible;
}
