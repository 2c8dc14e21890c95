// The seeded short run of the chaos harness (`npm run chaos -- --short`): each scenario of SHORT_RUN, on the
// harness's own cluster (REDIS_CLUSTER_BASE_PORT + 100), judged by the contract-only checker.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chaosBasePort, runGrid } from "../../../scripts/chaos/grid.ts";
import { failures } from "../../../scripts/chaos/report.ts";
import type { ScenarioResult } from "../../../scripts/chaos/run-scenario.ts";
import { SHORT_RUN, selectScenarios } from "../../../scripts/chaos/scenarios.ts";
import { engineOf } from "../../../scripts/redis-cluster.ts";

const scenarios = selectScenarios(SHORT_RUN).filter((s) => SHORT_RUN.includes(s.id));
let results: ScenarioResult[] = [];

beforeAll(async () => {
  results = await runGrid({ scenarios, basePort: chaosBasePort(), engine: engineOf(), seed: 1 });
}, 240_000);

afterAll(() => {
  results = [];
});

describe("chaos short run: the Quotas contract under the faults the product holds today", () => {
  it("runs every scenario of SHORT_RUN, each with load offered and decided", () => {
    expect(results.map((r) => r.scenario.id)).toEqual([...SHORT_RUN]);
    for (const r of results) {
      // 3 instances offered 2× a 100/s limit for 7 s or more, and at least a full window admitted: a run
      // that decided little has nothing for the window rule to judge
      expect(r.check.figures.offered, r.scenario.id).toBeGreaterThan(1000);
      expect(r.check.figures.admitted, r.scenario.id).toBeGreaterThanOrEqual(100);
      expect(r.notReady, r.scenario.id).toBe(0);
    }
  });

  it("judges the tenant scenario for crossing: each tenant's own limit, the hostile spellings, B's namespace, the restore", () => {
    const tenants = results.filter((r) => r.scenario.tenants);
    expect(tenants.length).toBeGreaterThan(0);
    for (const r of tenants) {
      const rules = r.check.verdicts.map((v) => v.rule);
      expect(
        rules.filter((rule) => rule === "window"),
        r.scenario.id,
      ).toHaveLength(2);
      expect(rules.filter((rule) => rule === "isolation").length, r.scenario.id).toBe(4);
      if (r.scenario.nemesis.dataLoss) expect(rules, r.scenario.id).toContain("restore");
      // every spelling that must be refused was refused at least once (not merely never answered)
      for (const h of r.hostile ?? []) if (h.mustRefuse) expect(h.refused, h.attempt).toBeGreaterThan(0);
    }
  });

  it.each(SHORT_RUN)("%s holds every verdict the checker judges", (id) => {
    const result = results.find((r) => r.scenario.id === id);
    expect(result, id).toBeDefined();
    expect(failures(result ? [result] : [])).toEqual([]);
  });
});
