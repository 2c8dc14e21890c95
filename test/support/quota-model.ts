// A reference model of lua/quota-sync/'s counting, written the slow obvious way: a log of every
// counted event and window sums recomputed from it. Property tests compare the script to it.
import type { QuotaRule, SyncRequest } from "../../sdk/src/protocol/index.ts";

/** lua/quota-sync/'s margin for callers' clocks: spent tokens count over W plus at least this much. */
export const STAMP_SKEW_MS = 10;
/** lua/quota-sync/: approximate usage settled later than this after its grant counts from this before the report. */
export const SETTLE_LAG_MS = 100;

/**
 * The bucket size and the number of buckets a window sums, as the script's header defines them: `span`
 * for reservations and usage (strict: grants not reported spent), `spentSpan` buckets of `spentBucketMs`
 * for strict tokens reported spent (counted from their stamp or the report).
 */
export function windowShape(
  rule: QuotaRule,
  windowMs: number,
): { bucketMs: number; span: number; spentBucketMs: number; spentSpan: number } {
  const bucketMs = windowMs <= 5000 ? 50 : windowMs / 100;
  const span =
    rule.mode === "strict" ? Math.ceil((windowMs + rule.leaseMs) / bucketMs) + 1 : Math.ceil(windowMs / bucketMs) + 1;
  const spentBucketMs = windowMs / 100;
  return { bucketMs, span, spentBucketMs, spentSpan: 101 + Math.ceil(STAMP_SKEW_MS / spentBucketMs) };
}

interface Event {
  at: number;
  count: number;
  /** strict: tokens reported spent, counted over `spentSpan` in the limits (by index) that still counted their grant. */
  spentFor?: boolean[];
}

export class QuotaModel {
  private readonly applied = new Set<string>();
  private readonly highest = new Map<string, number>();
  private readonly log = new Map<string, Event[]>();
  /** The latest `now` of a call that touched the key: a key's buckets never move back. */
  private readonly latest = new Map<string, number>();
  /** approximate: each (key, instance)'s allowance reserved at its last applied sync. */
  private readonly reservations = new Map<string, { at: number; amount: number }>();

  constructor(private readonly rule: QuotaRule) {}

  /** The status the script must answer, recorded as if the call ran. */
  status(request: SyncRequest): "applied" | "duplicate" | "stale" {
    const id = `${request.instanceId}/${request.seq}`;
    const high = this.highest.get(request.instanceId) ?? 0;
    if (this.applied.has(id)) return "duplicate";
    if (request.seq < high - 32) return "stale";
    this.applied.add(id);
    this.highest.set(request.instanceId, Math.max(high, request.seq));
    return "applied";
  }

  /** approximate: usage counted at min(at, now). */
  addUsage(key: string, now: number, usage: Array<[number, number]>): void {
    for (const [at, count] of usage) this.events(key).push({ at: Math.min(at, now), count });
  }

  touch(key: string, now: number): void {
    this.latest.set(key, Math.max(this.latest.get(key) ?? now, now));
  }

  /**
   * approximate, an applied sync of `instance`: its usage is charged to its previous allowance's
   * reservation (epochs in order), counted from the grant or, later than SETTLE_LAG_MS after it, from
   * SETTLE_LAG_MS before now; the unused rest goes back, usage beyond it counts at min(at, now),
   * and the new allowance is reserved in the key's current bucket.
   */
  settle(key: string, instance: string, now: number, usage: Array<[number, number]>, allowance: number): void {
    const id = `${key}/${instance}`;
    const previous = this.reservations.get(id);
    let credit = previous?.amount ?? 0;
    const beyond: Array<[number, number]> = [];
    for (const [at, count] of usage) {
      const take = Math.min(credit, count);
      credit -= take;
      if (count > take) beyond.push([at, count - take]);
    }
    if (previous && credit > 0) this.events(key).push({ at: previous.at, count: -credit });
    // usage settled long after its grant counts from SETTLE_LAG_MS before the report, never before the grant
    const charged = (previous?.amount ?? 0) - credit;
    // from the key's latest time, as a grant: a reporter whose clock is behind the key's cannot age it early
    const late = Math.max(now, this.latest.get(key) ?? now) - SETTLE_LAG_MS;
    if (previous && charged > 0 && late > previous.at) {
      this.events(key).push({ at: previous.at, count: -charged });
      this.events(key).push({ at: late, count: charged });
    }
    this.addUsage(key, now, beyond);
    const at = this.latest.get(key)!;
    this.events(key).push({ at, count: allowance });
    this.reservations.set(id, { at, amount: allowance });
  }

  /** strict: a grant counts in the key's current bucket (by its latest time). */
  addGrant(key: string, count: number): void {
    this.events(key).push({ at: this.latest.get(key)!, count });
  }

  /**
   * strict: tokens of the grant made at `grantedAt` reported spent at `now`, `ago` ms before the request
   * was sent: out of the grant, counted from now - ago and never before the grant (from now without an age).
   */
  addSpent(key: string, now: number, grantedAt: number, count: number, ago = 0): void {
    const latest = this.latest.get(key)!;
    const at = Math.min(grantedAt, now);
    const spentFor = this.rule.limits.map((limit) => {
      const { bucketMs, span } = windowShape(this.rule, limit.windowMs);
      return Math.floor(at / bucketMs) > Math.floor(latest / bucketMs) - span;
    });
    this.events(key).push({ at, count: -count });
    // the script's ring never moves back: a stamp past its latest bucket lands in that bucket
    const stamped = ago > 0 ? Math.max(now - ago, at) : latest;
    this.events(key).push({ at: Math.min(stamped, latest), count, spentFor });
  }

  /** What each window of the key holds now, summed from the log. */
  used(key: string): number[] {
    const latest = this.latest.get(key)!;
    return this.rule.limits.map((limit, i) => {
      const { bucketMs, span, spentBucketMs, spentSpan } = windowShape(this.rule, limit.windowMs);
      const inWindow = (event: Event) =>
        event.spentFor
          ? Math.floor(event.at / spentBucketMs) > Math.floor(latest / spentBucketMs) - spentSpan
          : Math.floor(event.at / bucketMs) > Math.floor(latest / bucketMs) - span;
      return this.events(key)
        .filter((event) => !event.spentFor || event.spentFor[i])
        .filter(inWindow)
        .reduce((sum, event) => sum + event.count, 0);
    });
  }

  private events(key: string): Event[] {
    const events = this.log.get(key) ?? [];
    this.log.set(key, events);
    return events;
  }
}

/** The most any window of `windowMs` holds, over every window ending at a use (uses sorted or not). */
export function maxInAnyWindow(uses: number[], windowMs: number): number {
  const sorted = [...uses].sort((a, b) => a - b);
  let most = 0;
  let start = 0;
  for (let end = 0; end < sorted.length; end++) {
    while (sorted[start]! <= sorted[end]! - windowMs) start++;
    most = Math.max(most, end - start + 1);
  }
  return most;
}
