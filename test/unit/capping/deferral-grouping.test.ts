// Deferred sends are grouped: one message per eligible instant and 10,000 users, each small enough for a
// one-time schedule's input (256 KB) and the campaign queue, named by its content, carrying what re-decides
// the sends exactly once (same campaign and channel, `at` = eligibleAt, `defer.since` = the first hold).
import { describe, expect, it } from "vitest";
import type { CampaignBatch } from "../../../functions/core/capping/campaign-batch.ts";
import type { CapBatchResult } from "../../../functions/core/capping/decisions.ts";
import { deferralMessages, USERS_PER_DEFERRAL } from "../../../functions/core/capping/deferral.ts";

/** EventBridge Scheduler's largest target input. */
const SCHEDULE_INPUT_BYTES = 256 * 1024;
const HOUR = 3_600_000;

function deferred(groups: { eligibleAt: number; userIds: number[] }[], judgedAt: number): CapBatchResult {
  return {
    at: judgedAt,
    policyVersion: "v",
    decisions: [],
    totals: {},
    held: { judgedAt, zones: {}, deferred: groups },
  };
}

describe("deferral messages", () => {
  const batch: CampaignBatch = { campaignId: "blast", channel: "push", userIds: [], defer: { maxMs: 12 * HOUR } };

  it("puts a million users deferred to one instant in 100 messages, each under a schedule's 256 KB", () => {
    // the largest IDs: the longest bodies
    const userIds = Array.from({ length: 1_000_000 }, (_, i) => 4_293_967_295 + i);
    const messages = deferralMessages(batch, deferred([{ eligibleAt: 9 * HOUR, userIds }], 0));
    expect(messages).toHaveLength(1_000_000 / USERS_PER_DEFERRAL);
    expect(Math.max(...messages.map((m) => Buffer.byteLength(m.body)))).toBeLessThan(SCHEDULE_INPUT_BYTES);
    const ids = messages.flatMap((m) => (JSON.parse(m.body) as CampaignBatch).userIds);
    expect(ids).toEqual(userIds);
    expect(new Set(messages.map((m) => m.name)).size).toBe(messages.length);
  });

  it("re-decides at eligibleAt under the same campaign, keeps the first hold as since, and names a retry the same", () => {
    const result = deferred(
      [
        { eligibleAt: 2 * HOUR, userIds: [1, 2] },
        { eligibleAt: 5 * HOUR, userIds: [3] },
      ],
      HOUR,
    );
    const messages = deferralMessages({ ...batch, payload: { template: "t" } }, result);
    expect(messages.map((m) => JSON.parse(m.body))).toEqual([
      {
        campaignId: "blast",
        channel: "push",
        userIds: [1, 2],
        at: 2 * HOUR,
        defer: { maxMs: 12 * HOUR, since: HOUR },
        payload: { template: "t" },
      },
      {
        campaignId: "blast",
        channel: "push",
        userIds: [3],
        at: 5 * HOUR,
        defer: { maxMs: 12 * HOUR, since: HOUR },
        payload: { template: "t" },
      },
    ]);
    expect(deferralMessages({ ...batch, payload: { template: "t" } }, result).map((m) => m.name)).toEqual(
      messages.map((m) => m.name),
    );
    // a deferral deferred again keeps the first hold
    const again = deferralMessages({ ...batch, defer: { maxMs: 12 * HOUR, since: 0 } }, result);
    expect(again.map((m) => (JSON.parse(m.body) as CampaignBatch).defer?.since)).toEqual([0, 0]);
  });

  it("names a retried first batch the same although its since is each attempt's clock", () => {
    // a batch without `at` is judged at the attempt's clock: a retry 30 s later has another since, same sends
    const groups = [{ eligibleAt: 5 * HOUR, userIds: [1, 2, 3] }];
    const first = deferralMessages(batch, deferred(groups, HOUR));
    const retry = deferralMessages(batch, deferred(groups, HOUR + 30_000));
    expect(retry.map((m) => (JSON.parse(m.body) as CampaignBatch).defer?.since)).toEqual([HOUR + 30_000]);
    expect(retry.map((m) => m.name)).toEqual(first.map((m) => m.name));
    // other sends, another name: a different instant, other users, another maxMs
    const other = [
      deferralMessages(batch, deferred([{ eligibleAt: 6 * HOUR, userIds: [1, 2, 3] }], HOUR)),
      deferralMessages(batch, deferred([{ eligibleAt: 5 * HOUR, userIds: [1, 2] }], HOUR)),
      deferralMessages({ ...batch, defer: { maxMs: HOUR } }, deferred(groups, HOUR)),
    ].map(([m]) => m?.name);
    expect(new Set([first[0]?.name, ...other]).size).toBe(4);
  });
});
