// The policy's `quotas` section: validation naming the field, defaults, versions that follow the rule,
// QuotaSyncService publishing rules to its store only when they change (a fake store behind the port), and
// the stamp that orders those writes.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parsePolicy } from "../../../functions/core/capping/policy.ts";
import type { QuotaStore } from "../../../functions/core/quotas/quota-store.ts";
import { QuotaSyncService, rulesStamp } from "../../../functions/core/quotas/quota-sync-service.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { InvalidPolicyError } from "../../../functions/core/shared/errors.ts";
import { MAX_SLOT_GROUPS } from "../../../sdk/src/protocol/index.ts";

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
      leaseMs: 200,
      fallback: "deny",
      slotGroups: 1,
    });
    const changed = parsePolicy({ ...base, quotas: [{ ...api, limits: [{ window: "1s", max: 90 }] }] });
    expect(changed.quotas.get("api")!.version).not.toBe(one.version);
    expect(parsePolicy({ ...base, quotas: [api] }).quotas.get("api")!.version).toBe(one.version);
    expect(parsePolicy(base).quotas.size).toBe(0);
  });

  it("defaults a strict rule's fallback to deny and an approximate rule's to share", () => {
    const quotas = parsePolicy({ ...base, quotas: [api, { ...api, name: "loose", mode: "approximate" }] }).quotas;
    expect(quotas.get("api")!.rule.fallback).toBe("deny");
    expect(quotas.get("loose")!.rule.fallback).toBe("share");
    expect(issues([{ ...api, mode: "approximate", fallback: "share" }])).toEqual([]);
    expect(
      issues([
        { ...api, fallback: "deny" },
        { ...api, name: "open", fallback: "allow" },
      ]),
    ).toEqual([]);
  });

  it("refuses a strict rule that falls back to share, naming the field", () => {
    expect(issues([{ ...api, fallback: "share" }])).toEqual([
      'quotas[0].fallback: a strict rule cannot fall back to "share" (uncounted admissions); expected "deny" or "allow"',
    ]);
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
  it("removes the rules of the store's index that its policy lacks (written by another process), reading the index once per policy", async () => {
    const writes: string[] = [];
    let reads = 0;
    const store: QuotaStore = {
      sync: () => Promise.reject(new Error("not used")),
      publish: async (name, rule, _version, _groups, stamp) => {
        writes.push(`${name}:${rule ? "written" : "removed"}@${stamp}`);
        return true;
      },
      publishedNames: async () => {
        reads++;
        return ["api", "legacy"];
      },
      restore: () => Promise.reject(new Error("not used")),
    };
    const service = new QuotaSyncService({
      store,
      rules: async () => ({ quotas: new Map(), stamp: 0 }),
      clock: fixedClock(0),
    });
    const quotas = parsePolicy({ ...base, quotas: [api] }).quotas;
    await service.publish({ quotas, stamp: 10 });
    await service.publish({ quotas, stamp: 10 });
    expect(writes).toEqual(["api:written@10", "legacy:removed@10"]);
    expect(reads).toBe(1);
  });

  it("rejects when a write gets no answer while the index is read, and leaves no rejection unhandled", async () => {
    // a write that failed while the index read was pending was a rejection nobody handled: it ended the process
    const store: QuotaStore = {
      sync: () => Promise.reject(new Error("not used")),
      restore: () => Promise.reject(new Error("not used")),
      publish: () => Promise.reject(new Error("no reply within 50 ms")),
      publishedNames: () => new Promise((resolve) => setTimeout(() => resolve([]), 20)),
    };
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on("unhandledRejection", onUnhandled);
    try {
      const service = new QuotaSyncService({
        store,
        rules: async () => ({ quotas: new Map(), stamp: 0 }),
        clock: fixedClock(0),
      });
      const quotas = parsePolicy({ ...base, quotas: [api] }).quotas;
      await expect(service.publish({ quotas, stamp: 10 })).rejects.toThrow("no reply within 50 ms");
      await new Promise((resolve) => setTimeout(resolve, 10));
      expect(unhandled).toEqual([]);
    } finally {
      process.off("unhandledRejection", onUnhandled);
    }
  });

  it("writes a rule when it is new or changed, and removes one the policy dropped", async () => {
    const writes: string[] = [];
    const store: QuotaStore = {
      sync: () => Promise.reject(new Error("not used")),
      restore: () => Promise.reject(new Error("not used")),
      publish: async (name, rule, version, groups, stamp) => {
        writes.push(`${name}:${rule ? version : "removed"}:${groups}@${stamp}`);
        return true;
      },
      publishedNames: async () => [],
    };
    const service = new QuotaSyncService({
      store,
      rules: async () => ({ quotas: new Map(), stamp: 0 }),
      clock: fixedClock(0),
    });
    const v1 = parsePolicy({ ...base, quotas: [api, { ...api, name: "other", slotGroups: 2 }] }).quotas;
    await service.publish({ quotas: v1, stamp: 10 });
    await service.publish({ quotas: v1, stamp: 20 });
    const v2 = parsePolicy({ ...base, version: "p.2", quotas: [api] }).quotas;
    await service.publish({ quotas: v2, stamp: 30 });
    // each write carries the stamp of the policy it comes from: the store's compare-and-set orders them;
    // every slot group gets it (an instance on an earlier, larger slotGroups learns the change there)
    expect(writes).toEqual([
      `api:${v1.get("api")!.version}:${MAX_SLOT_GROUPS}@10`,
      `other:${v1.get("other")!.version}:${MAX_SLOT_GROUPS}@10`,
      `api:${v2.get("api")!.version}:${MAX_SLOT_GROUPS}@30`,
      `other:removed:${MAX_SLOT_GROUPS}@30`,
    ]);
  });
});

describe("rulesStamp", () => {
  const second = fc.integer({ min: 1_600_000_000, max: 2_000_000_000 }).map((s) => s * 1000);
  // a container's read, by its own clock: up to a minute after the write, and up to 1 s off either way
  const readAfter = (modifiedAt: number) => fc.integer({ min: -1000, max: 60_000 }).map((d) => modifiedAt + d);

  it("orders policies S3 wrote in different seconds by that write, whatever the readers' clocks", () => {
    fc.assert(
      fc.property(
        second,
        fc.integer({ min: 1, max: 3600 }),
        fc.integer({ min: -1000, max: 60_000 }),
        fc.integer({ min: -1000, max: 60_000 }),
        (older, gapSeconds, readOlder, readNewer) => {
          const newer = older + gapSeconds * 1000;
          expect(rulesStamp(newer, newer + readNewer)).toBeGreaterThan(rulesStamp(older, older + readOlder));
        },
      ),
    );
  });

  it("orders two reads of the same object by the read times within its second", () => {
    fc.assert(
      fc.property(
        second.chain((m) => fc.tuple(fc.constant(m), readAfter(m), readAfter(m))),
        ([modifiedAt, a, b]) => {
          const [sa, sb] = [rulesStamp(modifiedAt, a), rulesStamp(modifiedAt, b)];
          expect(sa).toBeGreaterThanOrEqual(modifiedAt);
          expect(sa).toBeLessThan(modifiedAt + 1000);
          if (a <= b) expect(sa).toBeLessThanOrEqual(sb);
        },
      ),
    );
  });
});
