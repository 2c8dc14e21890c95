// One instance's wall clock steps while a fleet of real SDK instances spends a strict rule at 3x its limit
// against the local cluster: the store's time (lua/quota-sync/store-time.lua) keeps every sliding window of
// W at most L, measured on the test's own clock. The SDK reads time only through its Clock port (clock.ts;
// the sync loop reads it, `check` never does), so the step is made there: its monotonic clock, like a real
// host's, does not move with the wall clock.
import type { Cluster } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectCluster, uniqueNamespace } from "../../../test/support/cluster.ts";
import { runFleet } from "../support/fleet.ts";
import { publishRule } from "../support/quota-cluster.ts";
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

/** Instance 0's clock steps by `stepMs` at 1 s into a 3.2 s run; the two others keep the true time. */
async function stepped(stepMs: number) {
  const namespace = uniqueNamespace();
  await publishRule(cluster, namespace, "api", rule, "v1");
  const run = await runFleet({
    cluster,
    namespace,
    rule: "api",
    key: "shared",
    instances: 3,
    durationMs: 3_200,
    perStep: 1,
    offset: (i, t) => (i === 0 && t >= 1_000 ? stepMs : 0),
  });
  return { worst: maxInWindow(run.admitted, rule.limits[0]!.windowMs), total: run.admitted.length };
}

describe("strict with one instance's clock stepped (3 instances, 3x the limit, windows on the test's clock)", () => {
  for (const stepMs of [100, 500, 1_200, -1_000]) {
    it(`a step of ${stepMs > 0 ? "+" : ""}${stepMs} ms: no sliding window of 1 s holds more than ${L}`, async () => {
      const { worst, total } = await stepped(stepMs);
      expect(worst).toBeLessThanOrEqual(L);
      // the fleet kept admitting (a test that admits nothing would pass the bound)
      expect(total).toBeGreaterThan(2 * L);
    }, 20_000);
  }
});
