// The seeded short run of the check API's chaos scenarios (`npm run chaos -- --short --scenario check-api`):
// the check API in a process of its own on the harness's own cluster (REDIS_CLUSTER_BASE_PORT + 100), clients
// of every algorithm with lagging, true and leading clocks and hot keys, every answer replayed against the
// contract's models.
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

const ids = PRODUCT_SHORT_RUN.filter((id) => id.startsWith("check-api/"));
let results: ProductResult[] = [];

beforeAll(async () => {
  const scenarios = selectProductScenarios(ids).filter((s) => ids.includes(s.id));
  results = await runProductGrid({ scenarios, basePort: chaosBasePort(), engine: engineOf(), seed: 1 });
}, 180_000);

afterAll(() => {
  results = [];
});

describe("chaos short run: the check API's contract under the faults it holds today", () => {
  it("runs every check API scenario of the short run, with requests allowed and denied", () => {
    expect(results.map((r) => r.id)).toEqual(ids);
    for (const r of results) {
      const f = r.check.figures;
      // 24 clients at 10 requests a second for 10 s or more: most limits bite, so both answers are many
      expect(f && "allowed" in f ? f.allowed : 0, r.id).toBeGreaterThan(500);
      expect(f && "denied" in f ? f.denied : 0, r.id).toBeGreaterThan(200);
    }
  });

  it.each(ids)("%s: no request passes that the contract denies", (id) => {
    const result = results.find((r) => r.id === id);
    expect(result, id).toBeDefined();
    expect(productFailures(result ? [result] : [])).toEqual([]);
  });
});
