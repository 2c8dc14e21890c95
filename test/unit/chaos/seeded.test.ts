// The chaos harness's arrival schedules: fixed by the seed, open-loop, idle inside the gaps.
import { describe, expect, it } from "vitest";
import { arrivals, seededRandom, seedOf } from "../../../scripts/chaos/seeded.ts";

describe("chaos arrival schedules", () => {
  it("gives the same schedule for the same seed and another for another seed", () => {
    const a = arrivals(seededRandom(seedOf(1, "none/strict/redis", 0)), 100, 0, 5000);
    const b = arrivals(seededRandom(seedOf(1, "none/strict/redis", 0)), 100, 0, 5000);
    const c = arrivals(seededRandom(seedOf(1, "none/strict/redis", 1)), 100, 0, 5000);
    expect([...a]).toEqual([...b]);
    expect([...a]).not.toEqual([...c]);
  });

  it("offers about the rate asked, in order, inside [from, to)", () => {
    const times = arrivals(seededRandom(7), 200, 1000, 11_000);
    // Poisson at 200/s over 10 s: 2,000 expected, a standard deviation of about 45
    expect(times.length).toBeGreaterThan(1800);
    expect(times.length).toBeLessThan(2200);
    expect(times.every((t, i) => t >= 1000 && t < 11_000 && (i === 0 || t >= (times[i - 1] as number)))).toBe(true);
  });

  it("offers nothing inside a gap (an idle outage) and resumes after it", () => {
    const times = arrivals(seededRandom(3), 200, 0, 6000, [[2000, 4000]]);
    expect(times.some((t) => t >= 2000 && t < 4000)).toBe(false);
    expect(times.some((t) => t >= 4000)).toBe(true);
  });
});
