// Priorities and reserves at the boundary: the policy's `reserve` on a cap, a batch's and a check's
// `priority`, each refused by field with what was expected.
import { describe, expect, it } from "vitest";
import { campaignBatchSchema } from "../../../functions/core/capping/campaign-batch.ts";
import { scriptProfiles } from "../../../functions/core/capping/cap-sends-script.ts";
import { frequencyRequestSchema } from "../../../functions/core/capping/frequency.ts";
import { parsePolicy } from "../../../functions/core/capping/policy.ts";
import { DEFAULT_PRIORITY, PRIORITY_NAMES, reservedAbove } from "../../../functions/core/capping/priority.ts";
import { InvalidPolicyError, ValidationError } from "../../../functions/core/shared/errors.ts";
import { parseOrThrow } from "../../../functions/core/shared/validation.ts";

const policyWith = (cap: unknown) => ({
  version: "p.1",
  channels: ["push"],
  segments: [],
  default: { name: "everyone", caps: { push: [cap] } },
});

function issuesOf(document: unknown): readonly string[] {
  try {
    parsePolicy(document);
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidPolicyError);
    return (error as InvalidPolicyError).issues;
  }
  throw new Error("expected the policy to be rejected");
}

describe("a cap's reserve", () => {
  it("compiles names and numbers to reserves by ascending priority", () => {
    const policy = parsePolicy(
      policyWith({ window: "1d", max: 5, reserve: { transactional: 1, "75": 1, triggered: 2 } }),
    );
    const [cap] = policy.capsFor(policy.defaultSegment, "push");
    expect(cap?.reserve).toEqual([
      { priority: 50, slots: 2 },
      { priority: 75, slots: 1 },
      { priority: 100, slots: 1 },
    ]);
    // a send sees the reserves above its own priority
    expect([0, 50, 60, 75, 100].map((p) => reservedAbove(cap?.reserve, p))).toEqual([4, 2, 2, 1, 0]);
    expect(policy.hasReserves("push")).toBe(true);
  });

  it("refuses a reserve of max or more in all, naming the field (every priority keeps a slot)", () => {
    expect(issuesOf(policyWith({ window: "1d", max: 2, reserve: { triggered: 1, transactional: 1 } }))).toEqual([
      "default.caps.push[0].reserve: 2 slots reserved in all, expected fewer than max (2)",
    ]);
    expect(issuesOf(policyWith({ window: "1d", max: 0, reserve: { triggered: 1 } }))).toEqual([
      "default.caps.push[0].reserve: 1 slots reserved in all, expected fewer than max (0)",
    ]);
  });

  it("refuses an unknown priority, a reserve for the lowest, a priority named twice and slots that are not a positive integer", () => {
    expect(issuesOf(policyWith({ window: "1d", max: 5, reserve: { urgent: 1 } }))).toEqual([
      'default.caps.push[0].reserve.urgent: unknown priority "urgent" (expected "transactional", "triggered", "promotional" or an integer from 0 to 100)',
    ]);
    expect(issuesOf(policyWith({ window: "1d", max: 5, reserve: { "101": 1 } }))[0]).toMatch(
      /reserve\.101: unknown priority/,
    );
    expect(issuesOf(policyWith({ window: "1d", max: 5, reserve: { "07": 1 } }))[0]).toMatch(
      /reserve\.07: unknown priority/,
    );
    expect(issuesOf(policyWith({ window: "1d", max: 5, reserve: { promotional: 1 } }))[0]).toMatch(
      /reserve\.promotional: a reserve for priority 0 \(promotional\) or higher is kept from nobody/,
    );
    expect(issuesOf(policyWith({ window: "1d", max: 5, reserve: { transactional: 1, "100": 1 } }))).toEqual([
      // (JSON's integer keys come first in a parsed object)
      'default.caps.push[0].reserve.transactional: "transactional" is priority 100, as "100" is',
    ]);
    expect(issuesOf(policyWith({ window: "1d", max: 5, reserve: { triggered: 0 } }))).toEqual([
      "default.caps.push[0].reserve.triggered: expected at least 1 slot",
    ]);
    expect(issuesOf(policyWith({ window: "1d", max: 5, reserve: { triggered: 1.5 } }))[0]).toMatch(
      /reserve\.triggered: expected a number of slots/,
    );
  });

  it("leaves a policy without reserves as it was: every priority gets the same script profiles", () => {
    const policy = parsePolicy(policyWith({ window: "1d", max: 3 }));
    expect(policy.hasReserves("push")).toBe(false);
    expect(scriptProfiles(policy, "push", 0, 100)).toEqual(scriptProfiles(policy, "push", 0, 0));
    expect(scriptProfiles(policy, "push", 0)[policy.defaultSegment]?.caps).toEqual([
      { windowMs: 86_400_000, max: 3, everyChannel: false },
    ]);
  });

  it("gives the script the room a priority sees and, where it is less, the cap's own max", () => {
    const policy = parsePolicy(policyWith({ window: "1d", max: 3, reserve: { triggered: 1, transactional: 1 } }));
    const capsAt = (priority: number) => scriptProfiles(policy, "push", 0, priority)[policy.defaultSegment]?.caps;
    expect(capsAt(0)).toEqual([{ windowMs: 86_400_000, max: 1, fullMax: 3, everyChannel: false }]);
    expect(capsAt(50)).toEqual([{ windowMs: 86_400_000, max: 2, fullMax: 3, everyChannel: false }]);
    expect(capsAt(100)).toEqual([{ windowMs: 86_400_000, max: 3, everyChannel: false }]);
  });
});

describe("a campaign's and a check's priority", () => {
  const batch = { campaignId: "reset", channel: "push", userIds: [1] };

  it("takes a name or an integer from 0 to 100, as its number; absent is promotional, the lowest", () => {
    expect(campaignBatchSchema.parse({ ...batch, priority: "transactional" }).priority).toBe(100);
    expect(campaignBatchSchema.parse({ ...batch, priority: "triggered" }).priority).toBe(50);
    expect(campaignBatchSchema.parse({ ...batch, priority: 75 }).priority).toBe(75);
    expect(campaignBatchSchema.parse(batch).priority).toBeUndefined();
    expect(DEFAULT_PRIORITY).toBe(PRIORITY_NAMES.promotional);
    expect(frequencyRequestSchema.parse({ userId: 1, channel: "push", priority: 0 }).priority).toBe(0);
  });

  it("refuses any other value, naming the field", () => {
    for (const priority of ["urgent", "Transactional", 101, -1, 2.5, null, "50", "toString"]) {
      const error = (() => {
        try {
          parseOrThrow(campaignBatchSchema, { ...batch, priority });
        } catch (e) {
          return e as ValidationError;
        }
        throw new Error(`accepted priority ${String(priority)}`);
      })();
      expect(error).toBeInstanceOf(ValidationError);
      expect(error.path).toBe("priority");
      expect(error.message).toMatch(/expected "transactional", "triggered", "promotional" or an integer from 0 to 100/);
    }
    expect(() => parseOrThrow(frequencyRequestSchema, { userId: 1, channel: "push", priority: "high" })).toThrow(
      ValidationError,
    );
  });
});
