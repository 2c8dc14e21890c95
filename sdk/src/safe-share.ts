// Degraded mode's local sliding windows. With the store unreachable past the keep period, an instance
// admits at most each limit over the last known instance count in any window of that limit: admissions
// are recorded per slot in a ring spanning the window plus one slot (the extra slot makes the bound hold
// for every window position, not only slot-aligned ones), and what is left is the share minus the ring.
import { MAX_EPOCHS_PER_KEY } from "./protocol/index.ts";
import { type QuotaHandle, Source } from "./state.ts";
import { capEpochs } from "./sync-request.ts";

/** Slots per window at most: 5 s windows get 250 ms slots, 1 s windows the sync interval's. */
const MAX_SLOTS = 20;

function slotMsOf(windowMs: number, tickMs: number): number {
  return Math.max(tickMs, Math.ceil(windowMs / MAX_SLOTS));
}

/**
 * Records the admissions since the last call in the slot of `now` (later than they happened, so they
 * leave the window later: conservative). The first call seeds the ring with the cost admitted since the
 * store last acknowledged this key's usage.
 */
export function recordAdmissions(handle: QuotaHandle, now: number, tickMs: number): void {
  const limits = handle.rule.definition?.limits ?? [];
  if (!handle.ring || handle.ring.length !== limits.length) {
    handle.ring = limits.map((l) => {
      const slotMs = slotMsOf(l.windowMs, tickMs);
      // the slots, then the absolute number of the newest slot
      const ring = new Float64Array(Math.ceil(l.windowMs / slotMs) + 2);
      ring[ring.length - 1] = Math.floor(now / slotMs);
      return ring;
    });
    handle.ringAdmitted = handle.ackedTotal;
  }
  const delta = handle.admittedTotal - handle.ringAdmitted;
  handle.ringAdmitted = handle.admittedTotal;
  for (let i = 0; i < limits.length; i++) {
    const ring = handle.ring[i] as Float64Array;
    const slots = ring.length - 1;
    const slotMs = slotMsOf((limits[i] as { windowMs: number }).windowMs, tickMs);
    const slot = Math.floor(now / slotMs);
    const head = ring[slots] as number;
    // clear the slots that left the window since the last call (all of them after a long gap)
    for (let s = head + 1; s <= Math.min(slot, head + slots); s++) ring[s % slots] = 0;
    const newest = Math.max(slot, head);
    ring[slots] = newest;
    ring[newest % slots] = (ring[newest % slots] as number) + delta;
  }
}

/** What the key may admit until the next tick under the safe share: the tightest limit's share minus its ring. */
export function safeShareLeft(handle: QuotaHandle): number {
  const ring = handle.ring;
  const maxes = handle.rule.maxes;
  const instances = handle.group.instances;
  if (!ring || instances <= 0) return 0;
  let left = Number.POSITIVE_INFINITY;
  for (let i = 0; i < ring.length; i++) {
    const r = ring[i] as Float64Array;
    let sum = 0;
    for (let s = 0; s < r.length - 1; s++) sum += r[s] as number;
    left = Math.min(left, Math.floor((maxes[i] as number) / instances) - sum);
  }
  return left;
}

/**
 * A tick of a key whose slot group the store does not answer: its admissions recorded in the local windows, the
 * allowance kept for `keepAllowanceMs` (strict: while its grants last), then the safe share (or the fallback).
 */
export function advanceDegraded(
  handle: QuotaHandle,
  now: number,
  degradedFor: number,
  strict: boolean,
  options: { tickMs: number; keepAllowanceMs: number; unknownRule: "allow" | "deny" },
): void {
  recordAdmissions(handle, now, options.tickMs);
  // approximate usage of this interval becomes an epoch, reported with its time when the store returns
  if (!strict && handle.used > 0) {
    handle.epochs.push(now, handle.used);
    handle.used = 0;
    capEpochs(handle.epochs, MAX_EPOCHS_PER_KEY);
  }
  // strict tokens cannot be kept past their lease: when none are left, the fallback applies at once
  const keep = strict ? handle.grants.length > 0 : degradedFor < options.keepAllowanceMs;
  if (handle.source === Source.Kept && keep) return;
  const behaviour = handle.rule.definition?.fallback ?? options.unknownRule;
  handle.source = Source.SafeShare;
  handle.left = behaviour === "allow" ? Number.POSITIVE_INFINITY : behaviour === "deny" ? 0 : safeShareLeft(handle);
}
