// Bad input is rejected before the store is touched, with an error naming the field.
import { describe, expect, it } from "vitest";
import type { CapStore } from "../../../functions/core/capping/cap-sends-script.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { ValidationError } from "../../../functions/core/shared/errors.ts";
import { rulesOf, simplePolicy, T0 } from "../../support/rules.ts";

const untouchable: CapStore = {
  capSends: () => Promise.reject(new Error("the store must not be called for invalid input")),
};
const rules = rulesOf(simplePolicy({ push: [{ window: "1d", max: 1 }] }));
const capper = new Capper({ store: untouchable, rules: () => rules, clock: fixedClock(T0) });
const valid = { campaignId: "spring", channel: "push", userIds: [1, 2] };

async function rejection(input: unknown): Promise<ValidationError> {
  try {
    await capper.capBatch(input as typeof valid);
  } catch (error) {
    expect(error).toBeInstanceOf(ValidationError);
    return error as ValidationError;
  }
  throw new Error("expected a ValidationError");
}

describe("capper input", () => {
  it("rejects user IDs outside 0..2^32-1 and non-integers, naming the element", async () => {
    for (const [bad, index] of [
      [-1, 1],
      [4_294_967_296, 0],
      [1.5, 1],
      ["7", 0],
      [null, 1],
    ] as const) {
      const userIds: unknown[] = [1, 2];
      userIds[index] = bad;
      const error = await rejection({ ...valid, userIds });
      expect(error.path).toBe(`userIds[${index}]`);
      expect(error.message).toContain("expected a user ID: an integer from 0 to 4294967295");
    }
    expect((await rejection({ ...valid, userIds: "1,2" })).path).toBe("userIds");
  });

  it("rejects empty, over-long and non-printable campaign IDs", async () => {
    expect((await rejection({ ...valid, campaignId: "" })).message).toBe("campaignId: must not be empty");
    expect((await rejection({ ...valid, campaignId: "x".repeat(129) })).message).toBe(
      "campaignId: must be at most 128 characters",
    );
    expect((await rejection({ ...valid, campaignId: "spring sale" })).message).toBe(
      "campaignId: expected printable ASCII without spaces",
    );
    expect((await rejection({ ...valid, campaignId: undefined })).path).toBe("campaignId");
  });

  it("rejects a channel the policy does not list", async () => {
    const error = await rejection({ ...valid, channel: "fax" });
    expect(error.message).toBe('channel: unknown channel "fax" (policy has email, push, sms)');
  });

  it("rejects a send time more than 5 minutes ahead of the clock, and accepts one just inside", async () => {
    expect((await rejection({ ...valid, at: T0 + 5 * 60_000 + 1 })).path).toBe("at");
    expect((await rejection({ ...valid, at: -1 })).path).toBe("at");
    await expect(capper.capBatch({ ...valid, at: T0 + 5 * 60_000 })).rejects.toThrow("the store must not be called");
  });

  it("decides uncounted exempt sends without the store", async () => {
    const result = await capper.capBatch({ ...valid, exempt: true });
    expect(result.decisions.map((d) => d.decision)).toEqual(["exempt", "exempt"]);
    expect(result.totals).toEqual({ unsegmented: { allowed: 0, capped: 0, duplicate: 0, exempt: 2, cappedBy: {} } });
  });
});
