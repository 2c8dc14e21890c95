// Record blobs per (tag, range) past their split size, busy users moving to the hash.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { rulesOf, T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
let store: RedisCapStore;
beforeAll(() => {
  cluster = connectCluster();
  store = new RedisCapStore(cluster);
});
afterAll(async () => {
  await cluster.quit();
});

// 3,000 users of tag 0, range 0, each alone on its page (record path): a blob of ~7 bytes a user splits past BLOB_SPLIT_BYTES, several times
const USERS = Array.from({ length: 3_000 }, (_, j) => 262_144 * j + (j % 1024));
const BUSY = [USERS[7] as number, USERS[1500] as number, USERS[2999] as number];
const LIMIT = 100;

describe("review: record blobs", () => {
  it("decide as a ledger says with blobs split past their size and busy users' records moving to the hash", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.record({
            kind: fc.constantFrom("campaign", "campaign", "busy"),
            users: fc.subarray(USERS, { minLength: 1, maxLength: 1500 }),
            campaign: fc.constantFrom("k1", "k2", "k3", "k4"),
            checks: fc.integer({ min: 1, max: 40 }),
            advance: fc.integer({ min: 0, max: 3_000 }),
          }),
          { minLength: 2, maxLength: 6 },
        ),
        async (steps) => {
          const namespace = uniqueNamespace();
          const rules = rulesOf({
            version: "v1",
            channels: ["push", "sms"],
            segments: [],
            default: { name: "rest", caps: { push: [{ window: "1d", max: 2 }], sms: [{ window: "1h", max: LIMIT }] } },
          });
          const clock = fixedClock(T0);
          const capper = new Capper({ store, rules: () => rules, clock, namespace });
          const pushes = new Map<number, Set<string>>();
          const sms = new Map<number, number>();
          for (const step of steps) {
            clock.advance(step.advance);
            if (step.kind === "busy") {
              for (const user of BUSY) {
                for (let i = 0; i < step.checks; i++) {
                  const result = await capper.checkUser({ userId: user, channel: "sms" });
                  const used = sms.get(user) ?? 0;
                  expect(result.decision, `sms check of ${user}`).toBe(used < LIMIT ? "allowed" : "capped");
                  if (used < LIMIT) sms.set(user, used + 1);
                }
              }
              continue;
            }
            const result = await capper.capBatch({ campaignId: step.campaign, channel: "push", userIds: step.users });
            const wrong: unknown[] = [];
            result.decisions.forEach((d, k) => {
              const user = step.users[k] as number;
              const mine = pushes.get(user) ?? new Set<string>();
              const expected = mine.has(step.campaign) ? "duplicate" : mine.size >= 2 ? "capped" : "allowed";
              if (d.decision !== expected) wrong.push({ user, actual: d.decision, expected });
              if (expected === "allowed") {
                mine.add(step.campaign);
                pushes.set(user, mine);
              }
            });
            expect(wrong.slice(0, 5), `campaign ${step.campaign}`).toEqual([]);
          }
        },
      ),
      { numRuns: Number(process.env.REVIEW_RUNS ?? 8) },
    );
  }, 600_000);
});
