// The chaos checker: a run's decisions judged against docs/quotas.md's contract alone.
// - strict: admitted in any sliding window [s, s + W) ≤ L, for every limit;
// - approximate: ≤ L + R · (min(F_late, 100 ms) + 2d), its published bound (F_late capped at 100 ms: the loosest);
// - "no denial under the limit" after ready(): a denial at t whose past window (t − W, t] held less than
//   max − cost admitted, for every limit of the rule in force;
// - utilisation: admitted ÷ min(offered, L per window) over a span; recovery: from the fault's end to the
//   first window that reaches 95 % of min(offered, L).
// A change of the rule counts from when the operator made it, with both the old and the new rule allowed
// for 1 s after ("an operator's change reaches every client within 1 s"); a removed rule admits nothing.
import {
  APPROXIMATE_LATE_CAP_MS,
  CHANGE_REACHES_CLIENTS_MS,
  type ContractPhase,
  type Decision,
  type History,
} from "./contract.ts";

export interface WorstWindow {
  windowMs: number;
  /** The window [at, at + windowMs) whose admissions pass their bound most (or come closest). */
  at: number;
  admitted: number;
  bound: number;
}

/** Admissions sorted by time, with the running sum of their costs (sums[i]: costs of times[0..i)). */
interface Admissions {
  times: Float64Array;
  sums: Float64Array;
}

function admissionsOf(decisions: readonly Decision[]): Admissions {
  const admitted = decisions.filter((d) => d.allowed).sort((a, b) => a.at - b.at);
  const times = new Float64Array(admitted.length);
  const sums = new Float64Array(admitted.length + 1);
  admitted.forEach((d, i) => {
    times[i] = d.at;
    sums[i + 1] = (sums[i] as number) + d.cost;
  });
  return { times, sums };
}

/** The first index whose time is ≥ t (or > t when `after`). */
function indexOf(times: Float64Array, t: number, after = false): number {
  let lo = 0;
  let hi = times.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    const v = times[mid] as number;
    if (v < t || (after && v === t)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Cost admitted in [from, to) (or (from, to] when `closedRight`). */
function admittedIn(a: Admissions, from: number, to: number, closedRight = false): number {
  const i = indexOf(a.times, from, closedRight);
  const j = indexOf(a.times, to, closedRight);
  return (a.sums[j] as number) - (a.sums[i] as number);
}

/** The phases that may be in force at some time of [from, to): each from its start to 1 s past the next's. */
export function phasesDuring(phases: readonly ContractPhase[], from: number, to: number): ContractPhase[] {
  return phases.filter((phase, i) => {
    const next = phases[i + 1];
    const until = next ? next.from + CHANGE_REACHES_CLIENTS_MS : Number.POSITIVE_INFINITY;
    return phase.from < to && until > from;
  });
}

/** What a phase lets through in a window of `windowMs` (Infinity: no limit of that window). */
export function phaseBound(phase: ContractPhase, windowMs: number, history: History): number {
  if (phase.removed) return 0;
  const limit = phase.limits.find((l) => l.windowMs === windowMs);
  if (!limit) return Number.POSITIVE_INFINITY;
  if (phase.mode === "strict") return limit.max;
  const rate = history.offeredPerSecond / 1000;
  return limit.max + rate * (APPROXIMATE_LATE_CAP_MS + 2 * history.storeDelayMs);
}

/** The bound of the window [from, from + windowMs): the loosest rule possibly in force during it. */
export function windowBound(phases: readonly ContractPhase[], windowMs: number, from: number, history: History) {
  const during = phasesDuring(phases, from, from + windowMs);
  if (during.length === 0) return Number.POSITIVE_INFINITY;
  return Math.max(...during.map((phase) => phaseBound(phase, windowMs, history)));
}

/**
 * For each limit's window, the sliding window that passes its bound most (the most admitted relative to it):
 * windows start at an admission (no other start holds more). The worst over every limit.
 */
export function worstWindow(history: History, phases: readonly ContractPhase[]): WorstWindow | undefined {
  const a = admissionsOf(history.decisions);
  const windows = [...new Set(phases.flatMap((p) => p.limits.map((l) => l.windowMs)))];
  let worst: WorstWindow | undefined;
  const score = (w: WorstWindow) => (w.bound === 0 ? w.admitted * 1e9 : w.admitted / w.bound);
  for (const windowMs of windows) {
    for (let i = 0; i < a.times.length; i++) {
      const at = a.times[i] as number;
      if (i > 0 && a.times[i - 1] === at) continue;
      const admitted = (a.sums[indexOf(a.times, at + windowMs)] as number) - (a.sums[i] as number);
      const bound = windowBound(phases, windowMs, at, history);
      if (!Number.isFinite(bound)) continue;
      const candidate = { windowMs, at, admitted, bound };
      if (!worst || score(candidate) > score(worst)) worst = candidate;
    }
  }
  return worst;
}

/** The phase in force at `t` for judging one decision, or undefined within 1 s of a change (either applies). */
function settledPhaseAt(phases: readonly ContractPhase[], t: number): ContractPhase | undefined {
  const during = phasesDuring(phases, t, t + Number.EPSILON);
  return during.length === 1 ? during[0] : undefined;
}

export interface DenialCount {
  denied: number;
  /** Denials of requests made after the instance's ready() while the rule's every past window had room. */
  underLimit: number;
  /** Decisions after ready() outside the ignored spans (what `underLimit` is a share of). */
  judged: number;
}

/** Denials under the limit, outside `ignore` spans (the faults: degraded mode may deny under the limit). */
export function denialsUnderLimit(
  history: History,
  phases: readonly ContractPhase[],
  ignore: readonly [number, number][] = [],
): DenialCount {
  const a = admissionsOf(history.decisions);
  let denied = 0;
  let underLimit = 0;
  let judged = 0;
  for (const d of history.decisions) {
    if (!d.allowed) denied++;
    const ready = history.readyAt.get(d.instance);
    // the promise is for requests made after ready(): one made before it and decided after is not judged
    if (ready === undefined || (d.askedAt ?? d.at) < ready) continue;
    if (ignore.some(([from, to]) => d.at >= from && d.at < to)) continue;
    const phase = settledPhaseAt(phases, d.at);
    if (!phase || phase.removed) continue;
    judged++;
    if (d.allowed) continue;
    const room = phase.limits.every((l) => admittedIn(a, d.at - l.windowMs, d.at, true) + d.cost <= l.max);
    if (room) underLimit++;
  }
  return { denied, underLimit, judged };
}

/** Admitted ÷ min(offered, L · span / W) over [from, to), by the rule in force at `from` (its first limit). */
export function utilisation(
  history: History,
  phases: readonly ContractPhase[],
  from: number,
  to: number,
): number | undefined {
  const phase = settledPhaseAt(phases, from) ?? phases[0];
  const limit = phase?.limits[0];
  if (!limit || phase?.removed || to <= from) return undefined;
  let offered = 0;
  let admitted = 0;
  for (const d of history.decisions) {
    if (d.at < from || d.at >= to) continue;
    offered += d.cost;
    if (d.allowed) admitted += d.cost;
  }
  const possible = Math.min(offered, (limit.max * (to - from)) / limit.windowMs);
  return possible > 0 ? admitted / possible : undefined;
}

/**
 * From `healAt` (the fault over) to the start of the first window [s, s + W) that admits ≥ `share` of
 * min(offered in it, L); undefined when no window up to the end of the run does.
 */
export function recoveryMs(
  history: History,
  phases: readonly ContractPhase[],
  healAt: number,
  share = 0.95,
  stepMs = 10,
): number | undefined {
  const a = admissionsOf(history.decisions);
  const offered = admissionsOf(history.decisions.map((d) => ({ ...d, allowed: true })));
  for (let s = healAt; ; s += stepMs) {
    const phase = settledPhaseAt(phases, s) ?? phases[phases.length - 1];
    const limit = phase?.limits[0];
    if (!limit || phase?.removed || s + limit.windowMs > history.endAt) return undefined;
    const possible = Math.min(admittedIn(offered, s, s + limit.windowMs), limit.max);
    if (possible > 0 && admittedIn(a, s, s + limit.windowMs) >= share * possible) return s - healAt;
  }
}
