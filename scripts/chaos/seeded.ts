// Seeded randomness for the chaos harness: the same `--seed` gives every instance the same arrival schedule.

/** mulberry32: a small, fast 32-bit generator; uniform in [0, 1). */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A seed of its own for each (run seed, scenario, instance), so adding a scenario changes no other's schedule. */
export function seedOf(seed: number, ...parts: (string | number)[]): number {
  let hash = seed >>> 0 || 1;
  for (const char of parts.join("/")) hash = Math.imul(hash ^ char.charCodeAt(0), 0x01000193) >>> 0;
  return hash;
}

/**
 * Open-loop Poisson arrivals at `perSecond` in [from, to) ms, skipping the `gaps` (idle spans): the schedule
 * is fixed before the run, whatever the answers.
 */
export function arrivals(
  random: () => number,
  perSecond: number,
  from: number,
  to: number,
  gaps: readonly [number, number][] = [],
): Float64Array {
  const times: number[] = [];
  if (perSecond <= 0) return new Float64Array(0);
  for (let t = from + (-Math.log(1 - random()) * 1000) / perSecond; t < to; ) {
    if (!gaps.some(([a, b]) => t >= a && t < b)) times.push(t);
    t += (-Math.log(1 - random()) * 1000) / perSecond;
  }
  return Float64Array.from(times);
}
