// Time and timers are ports: the SDK reads the clock only in its sync loop (never in `check`), and unit
// tests drive the loop with a fake clock and no real timers.

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /**
   * Milliseconds on a clock that never steps (strict spend stamps are ages measured on it: a wall clock
   * stepping forward between a spend and its report would age it too much). Default: `now`.
   */
  monotonic?(): number;
}

export const systemClock: Clock = { now: () => Date.now(), monotonic: () => performance.now() };

/** Schedules the next sync. Returned handles are cancelled with `cancel`; real ones never hold the process open. */
export interface Scheduler {
  schedule(delayMs: number, run: () => void): { cancel(): void };
}

export const unrefScheduler: Scheduler = {
  schedule(delayMs, run) {
    const timer = setTimeout(run, delayMs);
    // A quota sync must never keep a server (or a test runner) alive on its own.
    timer.unref();
    return { cancel: () => clearTimeout(timer) };
  },
};
