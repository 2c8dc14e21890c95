// Strict tokens on the instance's side: how many a key asks for, and charging what it admitted to its grants
// (oldest first), with the stamps the store dates the spends by; grants ending before the next tick become
// refunds. The engine (engine.ts) calls these from its sync side, never from `check`.
import { type GroupState, type QuotaHandle, Source } from "./state.ts";

/**
 * Strict: how many sync intervals of its recent rate an instance asks tokens for. Held tokens count in
 * the store from their grant, so each interval asked ahead costs the fleet about F / W of the limit
 * (two intervals held about 7 % of L idle). Less than the 1.2 F a reply may take: a key that runs dry
 * before its tick asks again early (`observe`, at most every `earlyGapMs`), so stock covers about half an
 * interval beyond that gap rather than the longest interval (1.25 intervals held 85-88 % at 1.2x; 0.75 with
 * early requests 89-92 %, 0.5 ran dry at N = 16: 69-71 %).
 */
const WANT_INTERVALS = 0.75;
/** Below this many requests an interval a key asks for FEW_WANT_INTERVALS (N = 64 at 1.2x: about 1). */
const FEW_PER_INTERVAL = 4;
const FEW_WANT_INTERVALS = 1.25;

/** Observations kept per key between two ticks (the oldest goes first: its spends take the next stamp). */
const MAX_STAMPS = 16;

/**
 * Strict: enough tokens for the key's recent rate for WANT_INTERVALS intervals (one lease and an
 * interval when the lease is shorter; a key that runs dry sooner asks again early), less
 * what it holds; 1 when it has demand. Tokens held unspent count in the store's windows from their
 * grant, so an instance holds little more than it will spend before the next sync reports it. The
 * interval is the one the loop last took when that was longer (`elapsedMs`): a loop whose timers run
 * late would otherwise run dry between replies while the store has capacity left to grant.
 */
export function tokensWanted(
  handle: QuotaHandle,
  offered: number,
  leaseMs: number,
  elapsedMs: number,
  syncIntervalMs: number,
): number {
  const interval = Math.max(syncIntervalMs, elapsedMs);
  // a key with a few requests an interval (many instances sharing a limit) runs dry on chance alone with
  // short stock, and its early requests are often refused as short grants: it keeps 1.25 intervals
  const intervals = handle.rate * interval >= FEW_PER_INTERVAL ? WANT_INTERVALS : FEW_WANT_INTERVALS;
  const horizon = Math.min(intervals * interval, leaseMs + syncIntervalMs);
  const target = Math.ceil(handle.rate * horizon);
  // requests awaiting this sync (`decide`) need at least their cost, whatever the rate says so far
  const need = handle.waiting - Math.max(0, handle.left);
  // a key decided by `decide` asks no stock ahead near the limit (the store had less left after its last
  // grant than the fleet would hold in stock): tokens one instance holds idle count in every window while
  // another instance's request is denied under the limit, and `decide` asks for what a request needs when
  // it needs it. A key decided by `check` alone keeps its stock: it has no other way to get tokens
  if (handle.onDemand && handle.headroom < target * Math.max(1, handle.group.instances)) return Math.max(need, 0);
  const want = target - Math.max(0, handle.left);
  if (need > want && need > 0) return need;
  return want > 0 ? want : offered > 0 && handle.left < 1 ? 1 : 0;
}

/**
 * Strict: charges what was admitted since the last call to the oldest grants, turns grants ending before
 * the next tick into refunds, and sets `left` to the tokens still held.
 */
export function chargeGrants(handle: QuotaHandle, now: number, endAll: boolean, mono: number, tickMs: number): void {
  const grants = handle.grants;
  // what was admitted up to each observation was spent before its stamp; the rest before `mono`. Tokens
  // admitted under the fallback (no grant) were never reserved: there is nothing to charge them to.
  const stamps = handle.stamps;
  let g = 2;
  for (let s = 0; s <= stamps.length; s += 2) {
    const upTo = s < stamps.length ? (stamps[s + 1] as number) : handle.admittedTotal;
    const stamp = s < stamps.length ? (stamps[s] as number) : mono;
    let spend = upTo - handle.charged;
    if (spend <= 0) continue;
    handle.charged = upTo;
    for (; g < grants.length && spend > 0; g += 3) {
      const take = Math.min(spend, grants[g] as number);
      if (take > 0) recordSpent(handle.spent, grants[g - 2] as number, take, stamp);
      grants[g] = (grants[g] as number) - take;
      spend -= take;
      if ((grants[g] as number) > 0) break;
    }
  }
  stamps.length = 0;
  handle.observed = handle.admittedTotal;
  const horizon = endAll ? Number.POSITIVE_INFINITY : now + tickMs;
  let kept = 0;
  for (let i = 0; i < grants.length; i += 3) {
    const [grantedAt, expiresAt, tokens] = [grants[i] as number, grants[i + 1] as number, grants[i + 2] as number];
    if (expiresAt <= horizon) {
      if (tokens > 0) handle.refunds.push(grantedAt, tokens);
    } else if (tokens > 0) {
      grants[kept++] = grantedAt;
      grants[kept++] = expiresAt;
      grants[kept++] = tokens;
    }
  }
  grants.length = kept;
  if (handle.source === Source.Assigned || handle.source === Source.Kept) handle.left = handle.held();
}

/**
 * Adds `count` spent from the grant made at `grantedAt` before `stamp` to a [grantedAt, count, stamp, ...]
 * list (one triple per grant and stamp).
 */
function recordSpent(spent: number[], grantedAt: number, count: number, stamp: number): void {
  for (let i = 0; i < spent.length; i += 3) {
    if (spent[i] === grantedAt && spent[i + 2] === stamp) {
      spent[i + 1] = (spent[i + 1] as number) + count;
      return;
    }
  }
  spent.push(grantedAt, count, stamp);
}

/**
 * Keeps at most `most` triples in a spent list: two of the same grant merge at the later stamp (counted
 * later, never early out of a window). Grants are never merged: each leaves its own grant's bucket.
 */
export function mergeSpent(spent: number[], most: number): void {
  for (let i = 0; spent.length > 3 * most && i < spent.length; i += 3) {
    for (let j = i + 3; j < spent.length; j += 3) {
      if (spent[j] !== spent[i]) continue;
      spent[i + 1] = (spent[i + 1] as number) + (spent[j + 1] as number);
      spent[i + 2] = Math.max(spent[i + 2] as number, spent[j + 2] as number);
      spent.splice(j, 3);
      j -= 3;
    }
  }
}

/** What the tightest limit had left in the store after a reply's grant. */
export function headroomOf(maxes: Float64Array, used: readonly number[]): number {
  let left = Number.POSITIVE_INFINITY;
  for (let i = 0; i < maxes.length; i++) left = Math.min(left, (maxes[i] as number) - (used[i] ?? 0));
  return left;
}

/**
 * Between ticks (strict): notes, for each key that held tokens at the last tick, how many it had admitted
 * by `mono` (monotonic ms, read before the counts): those were spent before it. The next request reports
 * its spends with their age, so the store counts them from about when they were spent, not from the
 * report (up to an interval later). Never called on Lambda (no timers): every spend is then dated at
 * the tick that reports it.
 */
export function observeSpending(
  spending: readonly QuotaHandle[],
  now: number,
  mono: number,
  gap: number,
): GroupState[] | undefined {
  let early: GroupState[] | undefined;
  for (const handle of spending) {
    // out of tokens and denying, while the store last said it had some to grant: a request of its group
    // before the tick brings them (at most one request per group every `earlyGapMs`)
    if (
      !early?.includes(handle.group) &&
      handle.denied > 0 &&
      handle.left < 1 &&
      // the store granted all it was asked last time: scarce capacity (a short grant) waits for the tick,
      // or overloaded keys would ask twice an interval for crumbs
      !handle.shortGrant &&
      now >= handle.denyUntil &&
      !handle.group.busy &&
      // a request left unanswered (the store away) goes again at the tick, not sooner
      handle.group.pending === undefined &&
      // a store that answered with an error hears again at the tick, not every `earlyGapMs`
      !handle.group.refused &&
      handle.group.lastSentAt >= 0 &&
      now - handle.group.lastSentAt >= gap
    ) {
      early ??= [];
      early.push(handle.group);
    }
    if (handle.admittedTotal === handle.observed) continue;
    handle.observed = handle.admittedTotal;
    const stamps = handle.stamps;
    // the oldest observation goes: its spends take the next one's later stamp
    if (stamps.length >= 2 * MAX_STAMPS) stamps.splice(0, 2);
    stamps.push(mono, handle.admittedTotal);
  }
  return early;
}
