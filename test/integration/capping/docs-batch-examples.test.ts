// The policy and the campaign batches of docs/api.md, run as written: the policy block is the one parsed,
// and every ```json block of "Campaign batch" is decided by the Capper on the cluster with the clock pinned at
// the batch's own `at` (or the docs' moment), so the page cannot drift from what the engine takes.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { EXAMPLES_NOW, readDoc } from "../../support/docs-examples.ts";
import { HOUR, rulesOf } from "../../support/rules.ts";

const doc = readDoc("docs/api.md");
/** The ```json blocks between a heading and the next heading of its level or above. */
function jsonBlocks(heading: string): string[] {
  const start = doc.indexOf(`${heading}\n`);
  if (start < 0) throw new Error(`docs/api.md has no "${heading}"`);
  const level = heading.split(" ")[0] as string;
  const rest = doc.slice(start + heading.length);
  const next = rest.search(new RegExp(`\\n#{1,${level.length}} `));
  const section = next < 0 ? rest : rest.slice(0, next);
  return [...section.matchAll(/```json\n([\s\S]*?)```/g)].map((match) => match[1] as string);
}

// the section's first block is the whole policy (the later ones are fragments of it)
const policyDocument = JSON.parse(jsonBlocks("## Policy (`functions/core/capping/policy.ts`)")[0] as string);
const batches = jsonBlocks("### Campaign batch (campaign queue)").map(
  (text) => JSON.parse(text) as { at?: number; priority?: unknown },
);

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

describe("the policy and campaign batches of docs/api.md", () => {
  const rules = rulesOf(policyDocument, { new: [17, 42] });
  const capperAt = () => {
    const clock = fixedClock(EXAMPLES_NOW);
    const capper = new Capper({
      store: new RedisCapStore(cluster),
      rules: () => rules,
      clock,
      namespace: uniqueNamespace(),
    });
    return { capper, clock };
  };

  it("has a policy with a reserve and batches with a priority to run", () => {
    expect(rules.policy.hasReserves("sms")).toBe(true);
    expect(batches.length).toBeGreaterThanOrEqual(3);
    expect(batches.some((batch) => batch.priority !== undefined)).toBe(true);
  });

  it("decides every batch as written, at its own `at`", async () => {
    const { capper, clock } = capperAt();
    for (const batch of batches) {
      clock.set(batch.at ?? EXAMPLES_NOW);
      const result = await capper.capBatch(batch as never);
      expect(result.decisions.length).toBeGreaterThan(0);
    }
  });

  it("lets the password reset take the SMS slot a promotional send leaves it, and displaces a promotional one", async () => {
    const { capper } = capperAt();
    const reset = batches.find((batch) => batch.priority === "transactional") as Record<string, unknown>;
    await capper.capBatch({ campaignId: "promo", channel: "sms", userIds: [42] });
    const { priority: _, ...promotional } = reset;
    const displaced = await capper.capBatch({ ...promotional, campaignId: "promo-2" } as never);
    expect(displaced.decisions[0]).toMatchObject({
      decision: "displaced",
      cap: { channel: "sms", window: "1d", max: 2 },
    });
    expect((await capper.capBatch(reset as never)).decisions[0]?.decision).toBe("allowed");
  });

  it("defers the flash sale's capped push to the instant push:1d admits it, within its six hours", async () => {
    const { capper, clock } = capperAt();
    const flash = batches.find((batch) => (batch as { campaignId?: string }).campaignId === "flash-sale-2026-11");
    expect(flash).toMatchObject({ defer: { maxMs: 6 * HOUR } });
    // user 42 ("new": 2 pushes a day) had two pushes 20 and 19 hours before
    for (const [campaignId, ago] of [
      ["morning", 20 * HOUR],
      ["noon", 19 * HOUR],
    ] as const)
      await capper.capBatch({ campaignId, channel: "push", userIds: [42], at: EXAMPLES_NOW - ago });
    clock.set(EXAMPLES_NOW);
    const result = await capper.capBatch(flash as never);
    const of42 = result.decisions.find((decision) => decision.userId === 42);
    expect(of42).toMatchObject({ decision: "deferred", eligibleAt: EXAMPLES_NOW + 4 * HOUR });
    expect(of42?.cap).toMatchObject({ channel: "push", window: "1d", max: 2 });
    expect(result.decisions.find((decision) => decision.userId === 17)?.decision).toBe("allowed");
    expect(result.held?.deferred).toEqual([{ eligibleAt: EXAMPLES_NOW + 4 * HOUR, userIds: [42] }]);
  });
});

describe("the calendar windows of docs/api.md", () => {
  const HOUR = 3_600_000;
  const DAY = 24 * HOUR;
  const fragment = jsonBlocks("## Policy (`functions/core/capping/policy.ts`)").find((text) =>
    text.includes('"weekStarts"'),
  );
  const capperOf = (document: unknown) => {
    const rules = rulesOf(document, { new: [17, 42] });
    const clock = fixedClock(EXAMPLES_NOW);
    return {
      capper: new Capper({
        store: new RedisCapStore(cluster),
        rules: () => rules,
        clock,
        namespace: uniqueNamespace(),
      }),
      clock,
    };
  };

  it("caps user 17's in-app messages at one a calendar day in Europe/Berlin, the policy's default zone", async () => {
    // the docs' moment is Sunday 06:00 in Berlin; 10:00 and 20:00 are outside the in-app quiet hours
    const { capper, clock } = capperOf(policyDocument);
    const sendAt = async (at: number, campaignId: string) => {
      clock.set(at);
      return (await capper.capBatch({ campaignId, channel: "inapp", userIds: [17], at })).decisions[0];
    };
    expect((await sendAt(EXAMPLES_NOW + 4 * HOUR, "welcome"))?.decision).toBe("allowed");
    expect(await sendAt(EXAMPLES_NOW + 14 * HOUR, "reminder")).toMatchObject({
      decision: "capped",
      cap: { channel: "inapp", window: "day", max: 1 },
    });
    expect((await sendAt(EXAMPLES_NOW + DAY + 3 * HOUR, "tips"))?.decision).toBe("allowed");
  });

  it("runs the calendar fragment as written: a day, a week from Sunday and a rolling 6 hours", async () => {
    expect(fragment).toBeDefined();
    const { caps, weekStarts } = JSON.parse(`{${fragment}}`) as { caps: unknown; weekStarts: string };
    const { capper, clock } = capperOf({ ...policyDocument, weekStarts, default: { name: "unsegmented", caps } });
    // user 99 is in no segment: the fragment's caps, in Berlin (UTC+1 in November)
    const sendAt = async (at: number, campaignId: string) => {
      clock.set(at);
      return (await capper.capBatch({ campaignId, channel: "push", userIds: [99], at })).decisions[0]?.decision;
    };
    const sunday10 = EXAMPLES_NOW + 4 * HOUR;
    expect(await sendAt(sunday10, "a")).toBe("allowed");
    expect(await sendAt(sunday10 + 7 * HOUR, "b")).toBe("capped");
    expect(await sendAt(sunday10 + DAY, "c")).toBe("allowed");
    expect(await sendAt(sunday10 + 2 * DAY, "d")).toBe("allowed");
    expect(await sendAt(sunday10 + 3 * DAY, "e")).toBe("capped");
    // the week from Sunday turns at next Sunday 00:00 in Berlin: 6 days and 14 hours after Sunday 10:00
    clock.set(sunday10 + 3 * DAY);
    const report = await capper.checkUser({ userId: 99, channel: "push", consume: false });
    expect(report.retryAfterMs).toBe(6 * DAY + 14 * HOUR - 3 * DAY);
    expect(report.windows[1]).toMatchObject({ window: "week", used: 3, resetAt: sunday10 + 6 * DAY + 14 * HOUR });
  });
});
