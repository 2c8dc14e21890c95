// Priority headroom end to end on the local stack: a promotional campaign through SQS fills what its
// priority may take and is displaced by the reserve (reported as such, not delivered), then a password reset
// (transactional) through the same queue takes the kept slot, and /v1/frequency says `reserve` for a
// promotional check. The stack's clock is pinned.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ConsumeOutcome } from "../../../functions/core/capping/campaign-consumer.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { DEFAULT_ARCHIVE_PREFIX } from "../../../functions/core/shared/decision-archive.ts";
import { campaignReport, campaignReportText, why, whyText } from "../../../scripts/archive-answers.ts";
import { openArchive } from "../../../scripts/archive-query.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { clientsOf, drainDelivery, invoke, receive, sendRaw, testStack, uploadRules } from "../../support/pipeline.ts";
import { signedFetch } from "../../support/signed-fetch.ts";

// pinned: the stack's clock, 2026-12-02 09:00 UTC
const T = Date.UTC(2026, 11, 2, 9);
const MINUTE = 60_000;
const users = Array.from({ length: 500 }, (_, i) => i);

const policy = {
  version: "reserve.1",
  channels: ["push"],
  segments: [],
  // 2 pushes a day, 1 of them kept for password resets and order updates
  default: { name: "everyone", caps: { push: [{ window: "1d", max: 2, reserve: { transactional: 1 } }] } },
};

describe("priority headroom on the local stack", () => {
  let stack: LocalStack;
  const clock = fixedClock(T);
  const outcomes: ConsumeOutcome[] = [];
  beforeAll(async () => {
    stack = await testStack({ clock, onOutcome: (outcome) => outcomes.push(outcome) });
    await uploadRules(stack, policy, {});
  });
  afterAll(async () => {
    await stack.stop();
  });

  async function consume(body: unknown) {
    await sendRaw(stack, JSON.stringify(body));
    const messages = await receive(stack, 1);
    expect((await invoke(stack, messages)).batchItemFailures).toEqual([]);
    const outcome = outcomes.at(-1) as ConsumeOutcome;
    if (outcome.kind === "dead-lettered") throw new Error(`dead-lettered: ${outcome.reason}`);
    return outcome;
  }
  const delivered = async () => (await drainDelivery(stack)).flatMap((message) => message.sends);

  it("a promotional campaign is displaced by the reserve, then a transactional send takes the kept slot", async () => {
    const first = await consume({ campaignId: "winter-sale", channel: "push", userIds: users });
    expect(first.result.totals.everyone?.allowed).toBe(500);
    expect(await delivered()).toHaveLength(500);

    clock.advance(MINUTE);
    const second = await consume({ campaignId: "flash-sale", channel: "push", userIds: users });
    expect(second.result.totals.everyone).toMatchObject({
      allowed: 0,
      capped: 0,
      displaced: 500,
      displacedBy: { "push:1d": 500 },
    });
    expect(await delivered()).toEqual([]);

    const check = await signedFetch(`${stack.endpoints.functionUrl}/v1/frequency`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ userId: 7, channel: "push", consume: false }),
    });
    expect(await check.json()).toMatchObject({
      allowed: false,
      decision: "displaced",
      reason: "reserve",
      retryAfterMs: 1440 * MINUTE - MINUTE,
      windows: [{ channel: "push", window: "1d", max: 2, reserved: 1, used: 1, remaining: 0 }],
    });

    clock.advance(MINUTE);
    const reset = await consume({
      campaignId: "password-reset",
      channel: "push",
      userIds: [7, 8],
      priority: "transactional",
    });
    expect(reset.result.totals.everyone?.allowed).toBe(2);
    expect((await delivered()).map((send) => send.dedupeId)).toEqual([
      "password-reset:push:7",
      "password-reset:push:8",
    ]);

    clock.advance(MINUTE);
    const again = await consume({ campaignId: "order-7", channel: "push", userIds: [7], priority: "transactional" });
    expect(again.result.decisions[0]?.decision).toBe("capped");
  });

  it("archives the displaced sends with their reason: the campaign report and why name the reserve", async () => {
    const archive = await openArchive({
      s3: clientsOf(stack).s3,
      bucket: stack.endpoints.bucket,
      prefix: DEFAULT_ARCHIVE_PREFIX,
    });
    try {
      const report = await campaignReport(archive, "flash-sale");
      expect(report.total).toMatchObject({ sent: 0, capped: 0, displaced: 500 });
      expect(report.segments[0]?.displacedBy).toEqual({ "push:1d": 500 });
      expect(campaignReportText(report)).toContain("displaced by the reserve of push:1d: 500");
      const rows = await archive.query<{ reason: string; capMax: number; capUsed: number | null }>(
        `SELECT reason, capMax, capUsed FROM decisions WHERE campaignId = 'flash-sale' AND userId = 3`,
      );
      expect(rows).toEqual([{ reason: "reserve", capMax: 2, capUsed: null }]);
      const answer = await why(archive, { userId: 3, campaignId: "flash-sale", channel: "push" });
      expect(whyText(answer, { userId: 3 })).toContain("displaced by the reserve of push:1d (max 2)");
    } finally {
      archive.close();
    }
  });
});
