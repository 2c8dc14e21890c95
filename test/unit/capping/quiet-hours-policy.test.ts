// The policy's zones and quiet hours, and the batch's defer, refused by field when wrong.
import { describe, expect, it } from "vitest";
import { campaignBatchSchema } from "../../../functions/core/capping/campaign-batch.ts";
import { parsePolicy } from "../../../functions/core/capping/policy.ts";
import type { InvalidPolicyError } from "../../../functions/core/shared/errors.ts";

const base = {
  version: "v",
  channels: ["push"],
  segments: [{ name: "vip", bitmap: "segments/vip.roaring", caps: {} }],
  default: { name: "rest", caps: {} },
};
const issuesOf = (policy: unknown) => {
  try {
    parsePolicy(policy);
    return [];
  } catch (error) {
    return (error as InvalidPolicyError).issues;
  }
};

describe("policy zones and quiet hours", () => {
  it("takes defaultZone, zones and quiet hours policy-wide and per segment, by channel", () => {
    const policy = parsePolicy({
      ...base,
      defaultZone: "Europe/Berlin",
      zones: ["Asia/Kolkata", "America/Sao_Paulo"],
      quietHours: { "*": [{ from: "22:00", to: "07:00" }] },
      segments: [{ ...base.segments[0], quietHours: { push: [{ from: "12:00", to: "14:00", days: ["sat", "sun"] }] } }],
    });
    expect(policy.defaultZone).toBe("Europe/Berlin");
    expect(policy.zones).toEqual(["Asia/Kolkata", "America/Sao_Paulo"]);
    expect(policy.quietFor(0, "push")).toEqual([
      { from: 22 * 60, to: 7 * 60 },
      { from: 12 * 60, to: 14 * 60, days: [5, 6] },
    ]);
    expect(policy.quietFor(1, "push")).toEqual([{ from: 22 * 60, to: 7 * 60 }]);
    expect(policy.hasQuietHours("push")).toBe(true);
  });

  it("defaults to UTC and no quiet hours: a policy written before them decides as it did", () => {
    const policy = parsePolicy(base);
    expect(policy.defaultZone).toBe("UTC");
    expect(policy.zones).toEqual([]);
    expect(policy.hasQuietHours("push")).toBe(false);
  });

  it("names the field of each mistake", () => {
    expect(issuesOf({ ...base, defaultZone: "+05:30" })).toEqual([
      "defaultZone: expected an IANA time zone name (Intl.supportedValuesOf, or an alias of one)",
    ]);
    expect(issuesOf({ ...base, zones: ["Europe/Paris", "Europe/Paris"] })).toEqual([
      'zones[1]: duplicate zone "Europe/Paris"',
    ]);
    expect(issuesOf({ ...base, quietHours: { fax: [{ from: "21:00", to: "08:00" }] } })).toEqual([
      'quietHours.fax: unknown channel "fax" (not in channels)',
    ]);
    expect(issuesOf({ ...base, quietHours: { push: [{ from: "9pm", to: "08:00" }] } })).toEqual([
      'quietHours.push[0].from: expected a local time "HH:MM" from "00:00" to "23:59"',
    ]);
    expect(issuesOf({ ...base, quietHours: { push: [{ from: "08:00", to: "08:00" }] } })).toEqual([
      'quietHours.push[0]: expected "from" and "to" to differ',
    ]);
  });

  it("refuses quiet hours that leave less than 2 free hours in a row in a week (a send must get out)", () => {
    // quiet from midnight to 22:00 every day: 22:00-24:00 is free, just enough
    const day = [
      { from: "00:00", to: "12:00" },
      { from: "12:00", to: "22:00" },
    ];
    expect(issuesOf({ ...base, quietHours: { push: day } })).toEqual([]);
    const allButAnHour = [...day, { from: "22:00", to: "23:00" }];
    expect(issuesOf({ ...base, quietHours: { push: allButAnHour } })).toEqual([
      'segments[0].quietHours: quiet hours of channel "push" leave no 2 free hours in a row in a week',
      'default.quietHours: quiet hours of channel "push" leave no 2 free hours in a row in a week',
    ]);
  });
});

describe("campaign batch defer", () => {
  const batch = { campaignId: "c", channel: "push", userIds: [1] };
  it("takes defer.maxMs up to 7 days, and refuses what it does not know by name", () => {
    expect(campaignBatchSchema.parse({ ...batch, defer: { maxMs: 3_600_000 } }).defer).toEqual({ maxMs: 3_600_000 });
    expect(campaignBatchSchema.safeParse({ ...batch, defer: { maxMs: 8 * 86_400_000 } }).success).toBe(false);
    expect(campaignBatchSchema.safeParse({ ...batch, defer: { maxMS: 1 } }).success).toBe(false);
  });
});
