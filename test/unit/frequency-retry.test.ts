// frequencyReport's retryAfterMs against the reference model: the earliest time the same check is allowed.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { CapDecision } from "../../functions/core/capping/decisions.ts";
import { frequencyReport } from "../../functions/core/capping/frequency.ts";
import type { CapRule } from "../../functions/core/capping/policy.ts";
import { worstWindowWith } from "../support/capping-model.ts";

const capped = { segment: "rest", decision: "capped" } as unknown as CapDecision;
const modelAllows = (caps: CapRule[], times: number[], x: number) =>
  caps.every((cap) => worstWindowWith(times, x, cap.windowMs) <= cap.max);

describe("frequencyReport retryAfterMs", () => {
  it("says 70 s, not 20 s, when sends ahead of now keep the later windows full (a: 2 per 1m)", () => {
    const caps: CapRule[] = [{ channel: "a", window: "1m", windowMs: 60_000, max: 2 }];
    const history = [-40_000, 10_000, 30_000].map((at) => ({ at, identity: `a:k${at}` }));
    expect(frequencyReport(capped, caps, history, 0).retryAfterMs).toBe(70_000);
  });

  it("at now + retryAfterMs the model allows the check, and a millisecond before it does not", () => {
    const cap = fc.record({ windowMs: fc.integer({ min: 1, max: 50 }), max: fc.integer({ min: 1, max: 3 }) });
    fc.assert(
      fc.property(
        fc.array(cap, { minLength: 1, maxLength: 3 }),
        fc.array(fc.integer({ min: -100, max: 30 }), { maxLength: 12 }),
        (rawCaps, times) => {
          const caps = rawCaps.map((c) => ({ channel: "a", window: `${c.windowMs}ms`, ...c }));
          const now = 0;
          fc.pre(!modelAllows(caps, times, now));
          const history = times.map((at, i) => ({ at, identity: `a:k${i}` }));
          const retry = frequencyReport(capped, caps, history, now).retryAfterMs as number;
          expect(modelAllows(caps, times, now + retry)).toBe(true);
          for (let x = now + 1; x < now + retry; x++) expect(modelAllows(caps, times, x)).toBe(false);
        },
      ),
      { numRuns: 200 },
    );
  });
});
