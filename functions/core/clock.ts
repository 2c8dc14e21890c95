// Time is a port: production reads the system clock, tests pass a fixed one.

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

export function fixedClock(at: number): Clock & { set(at: number): void; advance(ms: number): void } {
  let current = at;
  return {
    now: () => current,
    set: (next) => {
      current = next;
    },
    advance: (ms) => {
      current += ms;
    },
  };
}
