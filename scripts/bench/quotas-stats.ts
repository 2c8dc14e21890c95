// What the Quotas harness reads from a run's decision times: merged and sorted, counted in a span, the most
// admitted in any sliding window, the decision delay at the onset of overload, and the per-instance trace.
import type { WorkerOutput } from "./quotas-worker.ts";

/** The trace's per-instance view: each instance's admissions, denials and sync calls, ms from the start. */
export function instancesOf(outputs: WorkerOutput[], startAt: number) {
  const at = (t: number) => Math.round((t - startAt) * 100) / 100;
  const by = new Map<number, { admitted: number[]; denied: number[]; syncs: number[][] }>();
  const of = (i: number) => {
    const entry = by.get(i) ?? { admitted: [], denied: [], syncs: [] };
    by.set(i, entry);
    return entry;
  };
  for (const o of outputs) {
    for (let k = 0; k < o.admitted.length; k++)
      of(o.admittedBy[k] as number).admitted.push(at(o.admitted[k] as number));
    for (let k = 0; k < o.denied.length; k++) of(o.deniedBy[k] as number).denied.push(at(o.denied[k] as number));
    const s = o.syncs ?? [];
    for (let k = 0; k < s.length; k += 7) {
      const [i, sent, replied, offered, amount, denyUntil, used] = s.slice(k, k + 7) as number[];
      of(i as number).syncs.push([
        at(sent as number),
        at(replied as number),
        offered as number,
        amount as number,
        denyUntil ? at(denyUntil) : 0,
        used as number,
      ]);
    }
  }
  return Object.fromEntries([...by].sort((a, b) => a[0] - b[0]));
}

export function merge(parts: Float64Array[]): Float64Array {
  const all = new Float64Array(parts.reduce((s, p) => s + p.length, 0));
  let at = 0;
  for (const p of parts) {
    all.set(p, at);
    at += p.length;
  }
  return all.sort();
}

export function count(times: Float64Array, from: number, to: number): number {
  let n = 0;
  for (const t of times) if (t >= from && t < to) n++;
  return n;
}

/** The most admissions in any window of `windowMs` that ends at or after `from` (earlier ones are warm-up). */
export function maxInWindow(
  times: Float64Array,
  windowMs: number,
  from: number,
  to = Number.POSITIVE_INFINITY,
): number {
  let best = 0;
  let start = 0;
  for (let end = 0; end < times.length; end++) {
    const t = times[end] as number;
    while (t - (times[start] as number) >= windowMs) start++;
    if (t >= from && t <= to) best = Math.max(best, end - start + 1);
  }
  return best;
}

/**
 * Decision delay at the onset of overload: from the moment the admitted count first reaches the limit (in
 * the first window, when nothing has left it yet) to the last admission of the instance that kept
 * admitting longest before its first denial.
 */
export function onsetDelay(
  outputs: WorkerOutput[],
  startAt: number,
  max: number,
  windowMs: number,
): number | undefined {
  const events: { t: number; by: number; ok: boolean }[] = [];
  for (const o of outputs) {
    for (let i = 0; i < o.admitted.length; i++)
      events.push({ t: o.admitted[i] as number, by: o.admittedBy[i] as number, ok: true });
    for (let i = 0; i < o.denied.length; i++)
      events.push({ t: o.denied[i] as number, by: o.deniedBy[i] as number, ok: false });
  }
  events.sort((a, b) => a.t - b.t);
  let admittedSoFar = 0;
  let reachedAt: number | undefined;
  const firstDenial = new Map<number, number>();
  const lastAdmit = new Map<number, number>();
  for (const e of events) {
    if (e.t >= startAt + windowMs) break;
    if (reachedAt === undefined) {
      if (e.ok && ++admittedSoFar >= max) reachedAt = e.t;
      continue;
    }
    if (!e.ok && !firstDenial.has(e.by)) firstDenial.set(e.by, e.t);
    if (e.ok && !firstDenial.has(e.by)) lastAdmit.set(e.by, e.t);
  }
  if (reachedAt === undefined) return undefined;
  let delay = 0;
  for (const t of lastAdmit.values()) delay = Math.max(delay, t - reachedAt);
  return delay;
}
