// What the chaos checker knows: a run's history (every decision on the harness's reference clock) and the
// rule's contract as docs/quotas.md states it, over time (an operator may change it mid-run). Nothing here
// knows how the SDK or the store decide.

/** One decision of one instance, `at` in ms on the reference clock (CLOCK_MONOTONIC, from the run's origin). */
export interface Decision {
  at: number;
  /** When the request was made (the SDK asked), if before `at`: a request may wait for a sync to be decided. */
  askedAt?: number;
  instance: number;
  allowed: boolean;
  /** Tokens the check asked for (the load asks 1). */
  cost: number;
}

export interface ContractLimit {
  windowMs: number;
  max: number;
}

/** The rule in force from `from` (ms, reference clock) on; `removed`: no rule by that name. */
export interface ContractPhase {
  from: number;
  mode: "strict" | "approximate";
  limits: ContractLimit[];
  removed?: boolean;
}

/** "An operator's change reaches every client within 1 s" (docs/quotas.md, the contract). */
export const CHANGE_REACHES_CLIENTS_MS = 1_000;
/** approximate's bound counts what instances admit in min(F_late, 100 ms) after a grant. */
export const APPROXIMATE_LATE_CAP_MS = 100;

export interface History {
  decisions: Decision[];
  /** When each instance's `ready()` (or first answered sync) resolved, by instance; absent: never. */
  readyAt: Map<number, number>;
  /** Offered rate of the whole fleet, requests per second (the open-loop schedule's, not the answers'). */
  offeredPerSecond: number;
  /** One-way delay to the store, ms: half the p99 sync round trip the instances saw before the fault. */
  storeDelayMs: number;
  /** First and last scheduled arrival, ms. */
  startAt: number;
  endAt: number;
}
