// A campaign's what-if: what `campaign push` of the same campaign would do to each user, decided now against
// the live caps in peek mode (nothing written), by segment and by the cap that bit, with when the capped
// users become eligible. The CLI and the console call this; its one dependency is the engine's peek.
import type { CampaignBatchInput } from "../core/capping/campaign-batch.ts";
import { campaignBatchSchema } from "../core/capping/campaign-batch.ts";
import type { CapBatchResult, DecisionKind } from "../core/capping/decisions.ts";
import type { Clock } from "../core/shared/clock.ts";
import { ValidationError } from "../core/shared/errors.ts";
import { isUserId, userIdMessage } from "../core/shared/send-fields.ts";
import { parseOrThrow } from "../core/shared/validation.ts";

/** The engine's no-writes readers (Capper.peek, Capper.peekEligible: docs/decisions/0007). */
export interface WhatIfEngine {
  peek(batch: CampaignBatchInput): Promise<CapBatchResult>;
  peekEligible(batch: CampaignBatchInput): Promise<{ result: CapBatchResult; eligibleAt: Map<number, number> }>;
}

/** The campaign as `campaign push` takes it (its payload is not needed to decide). */
export interface WhatIfCampaign extends Omit<CampaignBatchInput, "userIds" | "payload"> {
  userIds: ArrayLike<number>;
}

export interface WhatIfOptions {
  clock: Clock;
  /** Users per peek (default 50,000). */
  usersPerPeek?: number;
  /** Peeks in flight (default 4). */
  inFlight?: number;
  /**
   * The capped users whose eligible time is read (default all; 0: none): past it, an even sample of them. Reading
   * it takes every one's windows, so a large campaign samples.
   */
  eligibleSample?: number;
}

/** When capped users become eligible, counted by how long after `at`. */
export interface EligibleHistogram {
  /** Capped users whose eligible time was read (all, or an even sample), and of how many. */
  read: number;
  of: number;
  /** Users eligible within each bucket's `withinMs` of `at` (and after the bucket before). */
  buckets: { label: string; withinMs: number; users: number }[];
  /** Past the last bucket. */
  later: number;
  /** Not within the windows the store keeps (a cap of 0). */
  never: number;
}

export interface WhatIfSegment {
  segment: string;
  users: number;
  allowed: number;
  capped: number;
  cappedBy: Record<string, number>;
  /** Refused by room a cap keeps for higher priorities (the campaign's `priority` is below it). */
  displaced: number;
  /** Repeats of a user counted before (by this campaign, or earlier in its list). */
  duplicate: number;
  exempt: number;
  /** Held by quiet hours, or capped with `defer`, and deferred to when they end or the caps admit it. */
  deferred: number;
  /** Held by quiet hours and not sent: the campaign has no `defer`, or its end is past `defer.maxMs`. */
  quiet: number;
  dropped: number;
  eligibleAt: EligibleHistogram;
}

export interface WhatIfReport {
  campaignId: string;
  channel: string;
  /** The send time every user was decided at (the campaign's `at`, or the clock's reading when it has none). */
  at: number;
  policyVersion: string;
  users: number;
  segments: WhatIfSegment[];
  total: Omit<WhatIfSegment, "segment">;
}

const HOUR = 3_600_000;
const BUCKETS: [string, number][] = [
  ["1h", HOUR],
  ["6h", 6 * HOUR],
  ["1d", 24 * HOUR],
  ["2d", 48 * HOUR],
  ["7d", 168 * HOUR],
  ["30d", 720 * HOUR],
];

const emptyHistogram = (): EligibleHistogram => ({
  read: 0,
  of: 0,
  buckets: BUCKETS.map(([label, withinMs]) => ({ label, withinMs, users: 0 })),
  later: 0,
  never: 0,
});

const emptySegment = (segment: string): WhatIfSegment => ({
  segment,
  users: 0,
  allowed: 0,
  capped: 0,
  cappedBy: {},
  displaced: 0,
  duplicate: 0,
  exempt: 0,
  deferred: 0,
  quiet: 0,
  dropped: 0,
  eligibleAt: emptyHistogram(),
});

/**
 * The campaign's users (validated as `campaign push` validates them) decided now in peek mode. A user listed
 * more than once is decided once and its repeats follow the capper's rule: after an allowed send they are
 * duplicates, else they share its decision. Equals the real run's decisions when nothing else sends between.
 */
export async function campaignWhatIf(
  engine: WhatIfEngine,
  campaign: WhatIfCampaign,
  options: WhatIfOptions,
): Promise<WhatIfReport> {
  const { userIds, ...fields } = campaign;
  const batch = parseOrThrow(campaignBatchSchema, { ...fields, userIds: [] });
  // every user ID checked as a batch's are, before any is decided; a bad one is named by its place
  const ids = new Uint32Array(userIds.length);
  for (let i = 0; i < ids.length; i++) {
    const id = userIds[i];
    if (!isUserId(id)) throw new ValidationError(`userIds.${i}`, userIdMessage);
    ids[i] = id;
  }
  const at = batch.at ?? options.clock.now();
  ids.sort();
  // the distinct users and how many times each is listed
  const unique = new Uint32Array(ids.length);
  const repeats = new Uint32Array(ids.length);
  let distinct = 0;
  for (let i = 0; i < ids.length; i++) {
    if (i > 0 && ids[i] === ids[i - 1]) repeats[distinct - 1] = (repeats[distinct - 1] as number) + 1;
    else unique[distinct++] = ids[i] as number;
  }
  const perPeek = options.usersPerPeek ?? 50_000;
  const slices: [number, number][] = [];
  for (let start = 0; start < distinct; start += perPeek) slices.push([start, Math.min(distinct, start + perPeek)]);

  const segments = new Map<string, WhatIfSegment>();
  const segmentOf = (name: string) => {
    let segment = segments.get(name);
    if (!segment) {
      segment = emptySegment(name);
      segments.set(name, segment);
    }
    return segment;
  };
  const capped: { userId: number; segment: WhatIfSegment }[] = [];
  let policyVersion: string | undefined;
  const request = (from: number, to: number) => ({
    ...batch,
    at,
    userIds: Array.from(unique.subarray(from, to)),
  });
  await inTurn(slices, options.inFlight ?? 4, async ([from, to]) => {
    const result = await engine.peek(request(from, to));
    policyVersion = samePolicy(policyVersion, result.policyVersion);
    result.decisions.forEach((decision, k) => {
      const segment = segmentOf(decision.segment);
      const times = 1 + (repeats[from + k] as number);
      segment.users += times;
      add(segment, decision.decision, 1, decision.cap && `${decision.cap.channel}:${decision.cap.window}`);
      if (times > 1) {
        const repeatKind = decision.decision === "allowed" ? "duplicate" : decision.decision;
        add(segment, repeatKind, times - 1, decision.cap && `${decision.cap.channel}:${decision.cap.window}`);
      }
      if (decision.decision === "capped") capped.push({ userId: decision.userId, segment });
    });
  });

  await eligibleTimes(engine, batch, at, capped, options, (version) => {
    policyVersion = samePolicy(policyVersion, version);
  });
  const ordered = [...segments.values()];
  return {
    campaignId: batch.campaignId,
    channel: batch.channel,
    at,
    policyVersion: policyVersion ?? "",
    users: ids.length,
    segments: ordered,
    total: totalOf(ordered),
  };
}

function add(segment: WhatIfSegment, kind: DecisionKind, n: number, cap: string | undefined): void {
  segment[kind] += n;
  if (kind === "capped" && cap) segment.cappedBy[cap] = (segment.cappedBy[cap] ?? 0) + n;
}

/** A what-if answers for one policy: a policy swapped during it is an error (run it again). */
function samePolicy(known: string | undefined, version: string): string {
  if (known !== undefined && known !== version) {
    throw new Error(`the policy changed during the what-if (${known}, then ${version}): run it again`);
  }
  return version;
}

/** The capped users' eligible times (all, or an even sample), into each segment's histogram. */
async function eligibleTimes(
  engine: WhatIfEngine,
  batch: Omit<CampaignBatchInput, "userIds">,
  at: number,
  capped: { userId: number; segment: WhatIfSegment }[],
  options: WhatIfOptions,
  onPolicy: (version: string) => void,
): Promise<void> {
  const limit = options.eligibleSample ?? capped.length;
  for (const { segment } of capped) segment.eligibleAt.of++;
  if (limit <= 0 || capped.length === 0) return;
  const step = capped.length / Math.min(limit, capped.length);
  const chosen: typeof capped = [];
  for (let x = 0; Math.floor(x) < capped.length; x += step) chosen.push(capped[Math.floor(x)] as (typeof capped)[0]);
  chosen.sort((a, b) => a.userId - b.userId);
  const perPeek = Math.min(options.usersPerPeek ?? 50_000, 10_000);
  const slices: (typeof capped)[] = [];
  for (let start = 0; start < chosen.length; start += perPeek) slices.push(chosen.slice(start, start + perPeek));
  await inTurn(slices, options.inFlight ?? 4, async (slice) => {
    const { result, eligibleAt } = await engine.peekEligible({ ...batch, at, userIds: slice.map((c) => c.userId) });
    onPolicy(result.policyVersion);
    for (const { userId, segment } of slice) {
      const histogram = segment.eligibleAt;
      histogram.read++;
      const when = eligibleAt.get(userId);
      if (when === undefined) {
        histogram.never++;
        continue;
      }
      const bucket = histogram.buckets.find((b) => when - at <= b.withinMs);
      if (bucket) bucket.users++;
      else histogram.later++;
    }
  });
}

function totalOf(segments: WhatIfSegment[]): Omit<WhatIfSegment, "segment"> {
  const total = emptySegment("");
  for (const s of segments) {
    total.users += s.users;
    total.allowed += s.allowed;
    total.capped += s.capped;
    total.displaced += s.displaced;
    total.duplicate += s.duplicate;
    total.exempt += s.exempt;
    total.deferred += s.deferred;
    total.quiet += s.quiet;
    total.dropped += s.dropped;
    for (const [cap, n] of Object.entries(s.cappedBy)) total.cappedBy[cap] = (total.cappedBy[cap] ?? 0) + n;
    const [into, from] = [total.eligibleAt, s.eligibleAt];
    into.read += from.read;
    into.of += from.of;
    into.later += from.later;
    into.never += from.never;
    from.buckets.forEach((bucket, i) => {
      (into.buckets[i] as (typeof into.buckets)[0]).users += bucket.users;
    });
  }
  const { segment: _, ...rest } = total;
  return rest;
}

/** Runs `work` on every item, at most `limit` at once; the first failure rejects once the rest settled. */
async function inTurn<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  let failure: { error: unknown } | undefined;
  const worker = async () => {
    while (next < items.length && !failure) {
      const item = items[next++] as T;
      try {
        await work(item);
      } catch (error) {
        failure ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (failure) throw failure.error;
}
