// The seeded short run of the campaign pipeline's chaos scenarios (`npm run chaos -- --short --scenario
// pipeline`): consumer processes on the harness's own cluster (REDIS_CLUSTER_BASE_PORT + 100) under the faults
// the pipeline holds today, what came out judged against what went in by the contract-only checker.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chaosBasePort } from "../../../scripts/chaos/grid.ts";
import {
  PRODUCT_SHORT_RUN,
  type ProductResult,
  runProductGrid,
  selectProductScenarios,
} from "../../../scripts/chaos/product-grid.ts";
import { productFailures } from "../../../scripts/chaos/product-report.ts";
import { engineOf } from "../../../scripts/redis-cluster.ts";

const ids = PRODUCT_SHORT_RUN.filter((id) => id.startsWith("pipeline/") || id.startsWith("pipeline-quiet/"));
let results: ProductResult[] = [];

beforeAll(async () => {
  const scenarios = selectProductScenarios(ids).filter((s) => ids.includes(s.id));
  results = await runProductGrid({ scenarios, basePort: chaosBasePort(), engine: engineOf(), seed: 1 });
}, 240_000);

afterAll(() => {
  results = [];
});

describe("chaos short run: the campaign pipeline's contract under the faults it holds today", () => {
  it("runs every pipeline scenario of the short run, with sends delivered and capped", () => {
    expect(results.map((r) => r.id)).toEqual(ids);
    for (const r of results) {
      const f = r.check.figures;
      if (r.product === "pipeline-quiet") {
        // ~20 campaigns of ~10 users across New York's night's end: some held and delivered after it
        expect(f && "deferredDelivered" in f ? f.deferredDelivered : 0, r.id).toBeGreaterThan(0);
        expect(f && "delivered" in f ? f.delivered : 0, r.id).toBeGreaterThan(50);
        continue;
      }
      // ~40 campaigns of 24 users: the caps let some sends through and hold more back; a run that decided
      // little has nothing for the window rule to judge
      expect(f && "delivered" in f ? f.delivered : 0, r.id).toBeGreaterThan(100);
      expect(f && "capped" in f ? f.capped : 0, r.id).toBeGreaterThan(100);
    }
  });

  it.each(ids)("%s: no window over max, nothing lost, nothing counted twice, nothing out in quiet hours", (id) => {
    const result = results.find((r) => r.id === id);
    expect(result, id).toBeDefined();
    expect(productFailures(result ? [result] : [])).toEqual([]);
  });
});
