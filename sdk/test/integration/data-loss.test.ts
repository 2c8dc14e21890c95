// The store loses its state (FLUSHALL on every primary) while a fleet of real SDK instances spends a strict
// rule at 3x its limit through the direct transport. The QuotaSync function's scheduled restore (here every
// 200 ms instead of every minute, the same QuotaSyncService.restore over the real cluster) writes the rule
// back from the policy; the restored slot group grants nothing new for one window plus the lease, so no
// sliding window (on the test's clock) holds more than L, and an instance started after the loss is served
// again without an operator.
import type { Cluster } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisQuotaStore } from "../../../functions/adapters/redis-quota-store.ts";
import { lossQuietMs } from "../../../functions/core/quotas/quota-rule-script.ts";
import { type QuotaStateLoss, QuotaSyncService } from "../../../functions/core/quotas/quota-sync-service.ts";
import { systemClock } from "../../../functions/core/shared/clock.ts";
import { connectCluster, uniqueNamespace } from "../../../test/support/cluster.ts";
import { QuotaRuleGoneError } from "../../src/errors.ts";
import { runFleet } from "../support/fleet.ts";
import { FLEET_LIMIT, fleetStrictRule, maxInWindow } from "../support/quota-fixtures.ts";

let cluster: Cluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

const L = FLEET_LIMIT;
const rule = fleetStrictRule;

describe("strict when the store loses its state (3 instances at 3x the limit, a 4th started after the loss)", () => {
  it("FLUSHALL on every node: no sliding window of 1 s over L, the loss reported and counted, the rule restored, a new instance served again", async () => {
    const namespace = uniqueNamespace();
    const losses: QuotaStateLoss[] = [];
    const quotas = new Map([["api", { rule, version: "p1.api" }]]);
    const service = new QuotaSyncService({
      store: new RedisQuotaStore(cluster, namespace),
      rules: async () => ({ quotas, stamp: 1 }),
      clock: systemClock,
      onStateLost: (loss) => losses.push(loss),
    });
    await service.publish({ quotas, stamp: 1 });
    let flushedAt = -1;
    let restoredAt = -1;
    let nextRestore = Number.POSITIVE_INFINITY;
    const run = await runFleet({
      cluster,
      namespace,
      rule: "api",
      key: "shared",
      instances: 4,
      durationMs: 4_500,
      perStep: 1,
      startAt: (i) => (i === 3 ? 1_500 : 0),
      atStep: async (t, errors) => {
        if (flushedAt < 0 && t >= 1_000) {
          await Promise.all(cluster.nodes("master").map((node) => node.flushall()));
          flushedAt = t;
        }
        // the schedule runs a minute apart on AWS: an instance's sync sees the rule gone before it restores
        // (a loaded host stretches the 50 ms between syncs, so wait for the report, not for a time)
        if (flushedAt >= 0 && restoredAt < 0 && errors.some((error) => error instanceof QuotaRuleGoneError))
          nextRestore = t;
        if (t >= nextRestore) {
          nextRestore = t + 200;
          const started = performance.now();
          await service.restore({ quotas, stamp: 1 });
          if (restoredAt < 0) restoredAt = t + (performance.now() - started);
        }
      },
    });
    expect(maxInWindow(run.admitted, 1_000)).toBeLessThanOrEqual(L);
    expect(losses).toHaveLength(1);
    expect(losses[0]).toMatchObject({ rule: "api", seenBy: "schedule", quietMs: lossQuietMs(rule) });
    expect(losses[0]?.groups).toContain(0);
    // the instances that saw the rule gone said so
    expect(run.errors.some((error) => error instanceof QuotaRuleGoneError)).toBe(true);
    // admissions again once the quiet time after the first restore is over
    expect(restoredAt).toBeGreaterThan(flushedAt);
    const quietEnd = restoredAt + lossQuietMs(rule);
    expect(run.admitted.filter((t) => t > quietEnd).length).toBeGreaterThan(L / 2);
    // the instance started after the loss, which never saw the rule before, among them
    expect(run.byInstance[3]?.filter((t) => t > quietEnd).length).toBeGreaterThan(0);
  }, 30_000);
});
