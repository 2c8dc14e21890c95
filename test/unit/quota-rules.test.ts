// The policy's `quotas` section: validation naming the field, defaults, versions that follow the rule,
// and QuotaSyncService publishing rules to its store only when they change (a fake store behind the port).
import { describe, expect, it } from "vitest";
import { parsePolicy } from "../../functions/core/capping/policy.ts";
import type { QuotaStore } from "../../functions/core/quotas/quota-store.ts";
import { QuotaSyncService } from "../../functions/core/quotas/quota-sync-service.ts";
import { fixedClock } from "../../functions/core/shared/clock.ts";
import { InvalidPolicyError } from "../../functions/core/shared/errors.ts";

const base = { version: "p.1", channels: ["push"], segments: [], default: { name: "rest", caps: {} } };
const api = { name: "api", mode: "strict", limits: [{ window: "1s", max: 100 }] };

function issues(quotas: unknown): string[] {
  try {
    parsePolicy({ ...base, quotas });
  } catch (error) {
    if (error instanceof InvalidPolicyError) return [...error.issues];
    throw error;
  }
  return [];
}

describe("policy quotas section", () => {
  it("compiles a rule with its defaults and a version that changes with the rule, not only the policy", () => {
    const one = parsePolicy({ ...base, quotas: [api] }).quotas.get("api")!;
    expect(one.rule).toEqual({
      mode: "strict",
      limits: [{ windowMs: 1000, max: 100 }],
      leaseMs: 50,
      fallback: "share",
      slotGroups: 1,
    });
    const changed = parsePolicy({ ...base, quotas: [{ ...api, limits: [{ window: "1s", max: 90 }] }] });
    expect(changed.quotas.get("api")!.version).not.toBe(one.version);
    expect(parsePolicy({ ...base, quotas: [api] }).quotas.get("api")!.version).toBe(one.version);
    expect(parsePolicy(base).quotas.size).toBe(0);
  });

  it("names the field of each problem", () => {
    expect(issues([{ ...api, limits: [{ window: "2d", max: 1 }] }])).toEqual([
      "quotas[0].limits[0].window: expected a window from 1s to 1d",
    ]);
    expect(issues([{ ...api, leaseMs: 600 }])).toEqual([
      "quotas[0].leaseMs: expected at most half the shortest window",
    ]);
    expect(issues([api, api])).toEqual(['quotas[1].name: duplicate quota rule "api"']);
    expect(issues([{ ...api, burst: 3 }])).toEqual(["quotas[0].burst: unknown field"]);
    expect(issues([{ ...api, name: "a{b}" }])[0]).toMatch(/^quotas\[0\]\.name: /);
  });
});

describe("QuotaSyncService.publish", () => {
  it("writes a rule when it is new or changed, and removes one the policy dropped", async () => {
    const writes: string[] = [];
    const store: QuotaStore = {
      sync: () => Promise.reject(new Error("not used")),
      publish: async (name, rule, version, groups, stamp) => {
        writes.push(`${name}:${rule ? version : "removed"}:${groups}@${stamp}`);
      },
    };
    const service = new QuotaSyncService({
      store,
      rules: async () => ({ quotas: new Map(), loadedAt: 0 }),
      clock: fixedClock(0),
    });
    const v1 = parsePolicy({ ...base, quotas: [api, { ...api, name: "other", slotGroups: 2 }] }).quotas;
    await service.publish({ quotas: v1, loadedAt: 10 });
    await service.publish({ quotas: v1, loadedAt: 20 });
    const v2 = parsePolicy({ ...base, version: "p.2", quotas: [api] }).quotas;
    await service.publish({ quotas: v2, loadedAt: 30 });
    // each write carries when the policy it comes from was read: the store's compare-and-set orders them
    expect(writes).toEqual([
      `api:${v1.get("api")!.version}:1@10`,
      `other:${v1.get("other")!.version}:2@10`,
      `api:${v2.get("api")!.version}:1@30`,
      "other:removed:2@30",
    ]);
  });
});
