// A batch whose users need more calendar profiles than one script numbering holds (calendar-profiles.ts) is
// decided in parts: its users grouped by segment and zone pair, as many pairs a part as one numbering holds the
// profiles of, each user (and each repeat of it) in one part. Caps are per user, so the parts decide what the whole would; the
// parts' results are merged back into the batch's, in input order.
import type { CapBatchResult, CapDecision, DeferredSends, SegmentTotals, ZoneTotals } from "./decisions.ts";

/**
 * The batch's input positions by part, each part in input order (`pairOf`: each sorted user's pair, `positions`:
 * its input position, `partOf`: the part a pair was given; parts numbered from 0).
 */
export function partsOf(pairOf: Uint32Array, positions: Uint32Array, partOf: ReadonlyMap<number, number>): number[][] {
  const parts: number[][] = [];
  for (let j = 0; j < pairOf.length; j++) {
    const part = partOf.get(pairOf[j] as number) as number;
    parts[part] ??= [];
    (parts[part] as number[]).push(positions[j] as number);
  }
  for (const part of parts) part.sort((a, b) => a - b);
  return parts;
}

/** The batch's result from its parts' (`positions`: each part's input positions, as partsByPair gave them). */
export function mergeParts(size: number, parts: { positions: number[]; result: CapBatchResult }[]): CapBatchResult {
  const decisions = new Array<CapDecision>(size);
  for (const { positions, result } of parts) {
    positions.forEach((position, k) => {
      decisions[position] = result.decisions[k] as CapDecision;
    });
  }
  return { ...mergeFigures(parts.map((part) => part.result)), decisions };
}

/**
 * What the parts decided before one failed part way (`partial`, with only its answered decisions): the
 * decisions of each, in no particular order, for the caller to forward before it retries the batch.
 */
export function mergeDecided(done: CapBatchResult[], partial?: CapBatchResult): CapBatchResult {
  const results = partial ? [...done, partial] : done;
  return { ...mergeFigures(results), decisions: results.flatMap((result) => result.decisions) };
}

function mergeFigures(results: CapBatchResult[]): Omit<CapBatchResult, "decisions"> {
  const first = results[0] as CapBatchResult;
  const totals: Record<string, SegmentTotals> = {};
  for (const result of results) {
    for (const [segment, figures] of Object.entries(result.totals)) {
      totals[segment] = addTotals(totals[segment], figures);
    }
  }
  const merged: Omit<CapBatchResult, "decisions"> = { at: first.at, policyVersion: first.policyVersion, totals };
  const held = results.flatMap((result) => (result.held ? [result.held] : []));
  if (held.length > 0) {
    const zones: Record<string, ZoneTotals> = {};
    const deferred = new Map<number, number[]>();
    for (const part of held) {
      for (const [zone, figures] of Object.entries(part.zones)) {
        zones[zone] ??= { quiet: 0, deferred: 0, dropped: 0 };
        const sum = zones[zone];
        sum.quiet += figures.quiet;
        sum.deferred += figures.deferred;
        sum.dropped += figures.dropped;
      }
      for (const sends of part.deferred)
        deferred.set(sends.eligibleAt, [...(deferred.get(sends.eligibleAt) ?? []), ...sends.userIds]);
    }
    const byInstant: DeferredSends[] = [...deferred]
      .sort(([a], [b]) => a - b)
      .map(([eligibleAt, userIds]) => ({ eligibleAt, userIds: userIds.sort((a, b) => a - b) }));
    merged.held = { judgedAt: (held[0] as NonNullable<CapBatchResult["held"]>).judgedAt, zones, deferred: byInstant };
  }
  return merged;
}

/** A segment's totals plus another part's: counts added, each by-cap record added label by label. */
function addTotals(sum: SegmentTotals | undefined, part: SegmentTotals): SegmentTotals {
  if (sum === undefined) return structuredClone(part);
  const into = sum as unknown as Record<string, number | Record<string, number>>;
  for (const [field, value] of Object.entries(part)) {
    if (typeof value === "number") {
      into[field] = ((into[field] as number | undefined) ?? 0) + value;
    } else {
      into[field] ??= {};
      const record = into[field] as Record<string, number>;
      for (const [label, count] of Object.entries(value as Record<string, number>)) {
        record[label] = (record[label] ?? 0) + count;
      }
    }
  }
  return sum;
}
