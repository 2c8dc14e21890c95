// The campaign what-if on the local stack: it writes nothing (every key and value of the namespace, with
// its expiry, is the same before and after), and its prediction per segment and per cap equals what pushing
// the same campaign then does, repeats included; capped users' eligible times come from the engine.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { WhatIfReport } from "../../../functions/app/campaign-what-if.ts";
import { campaignWhatIfOn, pushCampaign } from "../../../functions/app/operator-actions.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { cliOutput } from "../../support/cli-output.ts";
import { clientsOf, drainDelivery, testStack, uploadRules } from "../../support/pipeline.ts";
import { namespaceSnapshot } from "../../support/store-snapshot.ts";

const T0 = Date.UTC(2026, 10, 30, 9, 30);
const HOUR = 3_600_000;
const policy = {
  version: "what-if.1",
  channels: ["email", "push"],
  segments: [{ name: "new", bitmap: "segments/new.roaring", caps: { push: [{ window: "1d", max: 1 }] } }],
  default: { name: "unsegmented", caps: { "*": [{ window: "7d", max: 2 }] } },
};
const first = Array.from({ length: 100 }, (_, i) => i);
// 0-49 new (capped by push:1d after the first campaign), 50-119 unsegmented; 5, 60 and 110 listed twice
const second = [...Array.from({ length: 120 }, (_, i) => 119 - i), 5, 60, 110];

type Totals = Record<string, { allowed: number; capped: number; duplicate: number; cappedBy: Record<string, number> }>;

describe("campaign what-if against the live caps", () => {
  let stack: LocalStack;
  const clock = fixedClock(T0);
  const pushed = new Map<string, Totals>();
  let namespace: string;
  const whatIf = (
    campaignId: string,
    userIds: number[],
    options: { eligibleSample?: number } = {},
    defer?: { maxMs: number },
  ) =>
    campaignWhatIfOn(
      { s3: clientsOf(stack).s3, bucket: stack.endpoints.bucket, cluster: stack.consumer.cluster, namespace },
      { campaignId, channel: "push", userIds, at: T0 + HOUR, ...(defer ? { defer } : {}) },
      { clock, ...options },
    );
  const push = async (campaignId: string, userIds: number[], at: number) => {
    await pushCampaign(stack.sqs, stack.endpoints.campaignQueueUrl, {
      campaignId,
      channel: "push",
      userIds,
      at,
      usersPerMessage: 30,
    });
    await stack.poller.drained();
    await drainDelivery(stack);
  };

  beforeAll(async () => {
    stack = await testStack({
      clock,
      onOutcome: (outcome) => {
        if (outcome.kind !== "forwarded") return;
        const campaign = pushed.get(outcome.campaignId) ?? {};
        for (const [segment, t] of Object.entries(outcome.result.totals)) {
          const into = campaign[segment] ?? { allowed: 0, capped: 0, duplicate: 0, cappedBy: {} };
          campaign[segment] = into;
          into.allowed += t.allowed;
          into.capped += t.capped;
          into.duplicate += t.duplicate;
          for (const [cap, n] of Object.entries(t.cappedBy)) into.cappedBy[cap] = (into.cappedBy[cap] ?? 0) + n;
        }
        pushed.set(outcome.campaignId, campaign);
      },
    });
    namespace = stack.consumer.config.KEY_NAMESPACE;
    await uploadRules(stack, policy, { new: first.slice(0, 50) });
    stack.poller.start();
    await push("c1", first, T0);
    // the what-ifs and the second push are decided an hour later
    clock.set(T0 + HOUR);
  });
  afterAll(async () => {
    await stack.poller.stop();
    await stack.stop();
  });

  let report: WhatIfReport;

  it("writes nothing: every key, value and expiry of the namespace is the same after the what-if and its CLI", async () => {
    const before = await namespaceSnapshot(stack.consumer.cluster, namespace);
    expect(before.size).toBeGreaterThan(0);
    report = await whatIf("c2", second);
    const cli = await cliOutput([
      ...["campaign", "what-if", "--endpoint", stack.endpoints.awsEndpoint, "--bucket", stack.endpoints.bucket],
      ...["--redis", ...(stack.endpoints.redis.slice(0, 3) as string[]), "--namespace", namespace],
      ...["--campaign", "c2", "--channel", "push", "--range", "0-119", "--at", String(T0 + HOUR)],
    ]);
    expect(cli.code).toBe(0);
    expect(cli.text).toContain("policy what-if.1): 120 users, nothing written");
    expect(cli.text).toMatch(/new\s+50\s+0\s+50\s+0\s+0/);
    expect(cli.text).toContain("capped by push:1d: 50");
    expect(await namespaceSnapshot(stack.consumer.cluster, namespace)).toEqual(before);
  });

  it("predicts, per segment and per cap, exactly what pushing the same campaign then does", async () => {
    const predicted: Totals = Object.fromEntries(
      report.segments.map((s) => [
        s.segment,
        { allowed: s.allowed, capped: s.capped, duplicate: s.duplicate, cappedBy: s.cappedBy },
      ]),
    );
    expect(predicted).toEqual({
      new: { allowed: 0, capped: 51, duplicate: 0, cappedBy: { "push:1d": 51 } },
      unsegmented: { allowed: 70, capped: 0, duplicate: 2, cappedBy: {} },
    });
    await push("c2", second, T0 + HOUR);
    expect(pushed.get("c2")).toEqual(predicted);
    expect(report.total).toMatchObject({ users: second.length, deferred: 0 });
  });

  it("after the push, predicts its re-push: every user a repeat, the capped ones capped again", async () => {
    const again = await whatIf("c2", second);
    expect(Object.fromEntries(again.segments.map((s) => [s.segment, [s.allowed, s.capped, s.duplicate]]))).toEqual({
      new: [0, 51, 0],
      unsegmented: [0, 0, 72],
    });
  });

  it("places each capped user's eligible time from the engine, all of them or an even sample", async () => {
    // capped at T0 + 1 h by a send at T0 under 1 per day: eligible at T0 + 1 d, 23 h after `at`
    const segment = report.segments.find((s) => s.segment === "new");
    expect(segment?.eligibleAt).toMatchObject({ read: 50, of: 50, later: 0, never: 0 });
    expect(segment?.eligibleAt.buckets.map((b) => [b.label, b.users])).toEqual([
      ["1h", 0],
      ["6h", 0],
      ["1d", 50],
      ["2d", 0],
      ["7d", 0],
      ["30d", 0],
    ]);
    // after c2's push, 50-99 hold 2 sends in 7 days too: 100 capped users, 10 of them read
    const sampled = await whatIf("c3", second, { eligibleSample: 10 });
    expect(sampled.total.eligibleAt).toMatchObject({ read: 10, of: 100 });
    const read = sampled.total.eligibleAt;
    expect(read.buckets.reduce((sum, b) => sum + b.users, read.later + read.never)).toBe(10);
  });

  it("with defer, reports the capped users as deferred to when push:1d admits them, or dropped past maxMs", async () => {
    // "new" (0-49) had c1's push at T0: push:1d admits them again at T0 + 1d, 23 hours after the what-if's at
    const within = await whatIf("c9", first.slice(0, 50), {}, { maxMs: 24 * HOUR });
    expect(within.total).toMatchObject({ capped: 0, deferred: 50, dropped: 0 });
    const past = await whatIf("c9", first.slice(0, 50), {}, { maxMs: 22 * HOUR });
    expect(past.total).toMatchObject({ capped: 0, deferred: 0, dropped: 50 });
  });
});
