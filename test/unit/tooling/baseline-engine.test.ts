// The quiet-hours bench's earlier engine: a commit the clone does not hold (a shallow clone) is a reason the
// section prints in its row, not a failure of the bench.
import { describe, expect, it } from "vitest";
import { baselineEngine } from "../../../scripts/bench/baseline-engine.ts";

describe("baselineEngine", () => {
  it("answers why for a commit this clone does not hold, and throws nothing", async () => {
    const missing = "0000000000000000000000000000000000000001";
    const engine = await baselineEngine(missing);
    expect(engine).toEqual({ missing: expect.stringMatching(new RegExp(`^commit ${missing} is not in this clone`)) });
  });
});
