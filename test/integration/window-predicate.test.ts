// The window rule exists twice: lua/cap-sends.lua decides with it, fullestWindowAround() in frequency.ts explains
// the decision (POST /v1/frequency). On the real cluster, the two must agree for any history and window.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../functions/core/capping/capper.ts";
import { fixedClock } from "../../functions/core/shared/clock.ts";
import { connectCluster, uniqueNamespace } from "../support/cluster.ts";
import { rulesOf, simplePolicy, T0 } from "../support/rules.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

const NOW = T0 + 10 * 86_400_000;

describe("the window rule of cap-sends.lua and of fullestWindowAround()", () => {
  it("agree: the script allows exactly when every reported window has room", async () => {
    const send = (windowMs: number) =>
      fc.record({
        // the edges of (now - window, now] are the interesting times, and sends stamped ahead of now; a
        // send may be backfilled by the policy's longest window at most
        offsetMs: fc.oneof(
          fc.constantFrom(-windowMs, -windowMs + 1, -1, 0, 1),
          fc.integer({ min: -windowMs, max: 2_000 }),
        ),
        channel: fc.constantFrom("push", "email"),
      });
    const scenario = fc
      .record({ pushSeconds: fc.integer({ min: 1, max: 5 }), allSeconds: fc.integer({ min: 1, max: 5 }) })
      .chain(({ pushSeconds, allSeconds }) =>
        fc.record({
          pushSeconds: fc.constant(pushSeconds),
          allSeconds: fc.constant(allSeconds),
          pushMax: fc.integer({ min: 1, max: 3 }),
          allMax: fc.integer({ min: 1, max: 4 }),
          sends: fc.array(send(Math.max(pushSeconds, allSeconds) * 1000), { maxLength: 7 }),
        }),
      );
    await fc.assert(
      fc.asyncProperty(scenario, async ({ pushSeconds, allSeconds, pushMax, allMax, sends }) => {
        const rules = rulesOf(
          simplePolicy({
            push: [{ window: `${pushSeconds}s`, max: pushMax }],
            "*": [{ window: `${allSeconds}s`, max: allMax }],
          }),
        );
        const capper = new Capper({
          store: new RedisCapStore(cluster),
          rules: () => rules,
          clock: fixedClock(NOW),
          namespace: uniqueNamespace(),
        });
        // record the history as exempt sends that count: stored whatever the caps say
        for (const [i, { offsetMs, channel }] of sends.entries()) {
          await capper.capBatch({
            campaignId: `c${i}`,
            channel,
            userIds: [7],
            at: NOW + offsetMs,
            exempt: true,
            countExempt: true,
          });
        }
        const report = await capper.checkUser({ userId: 7, channel: "push", at: NOW, consume: false });
        expect(report.allowed).toBe(report.windows.every((window) => window.used < window.max));
      }),
      { numRuns: 40 },
    );
  });
});
