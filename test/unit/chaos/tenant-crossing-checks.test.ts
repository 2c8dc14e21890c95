// The tenant scenarios' crossing checks on hand-made outcomes: each passes when the tenants stay apart and
// fails on the crossing it names (a refused spelling accepted, a foreign key in B's namespace, B starved
// to half its limit, a tenant's rule not restored).
import { describe, expect, it } from "vitest";
import { type HostileOutcome, hostileSpellings, isRefusal } from "../../../scripts/chaos/hostile.ts";
import { type IsolationInput, isolationVerdicts } from "../../../scripts/chaos/isolation.ts";
import { isOwnKey, TENANT_A, TENANT_B, tenantConfigKey } from "../../../scripts/chaos/tenants.ts";
import { StoreUnreachableError, SyncRejectedError } from "../../../sdk/src/errors.ts";

const outcome = (attempt: string, mustRefuse: boolean, counts: Partial<HostileOutcome> = {}): HostileOutcome => ({
  attempt,
  mustRefuse,
  refused: mustRefuse ? 10 : 0,
  accepted: mustRefuse ? 0 : 10,
  unanswered: 0,
  ...counts,
});

const rule = "c1-0";
const ownKeys = [
  "tg:t:b:q:rules",
  `tg:t:b:q:{${rule}.0}:cfg`,
  `tg:t:b:q:{${rule}.0}:seq`,
  `tg:t:b:q:{${rule}.0}:inst`,
  `tg:t:b:q:{${rule}.0}:k:k`,
];

function input(overrides: Partial<IsolationInput> = {}): IsolationInput {
  return {
    outcomes: [outcome("http: B's full key as the key", false), outcome("redis: HSET of B's rule configuration", true)],
    utilisations: [
      { tenant: "tenant-a", value: 0.97, min: 0.8 },
      { tenant: "tenant-b", value: 0.96, min: 0.8 },
    ],
    victim: { tenant: "tenant-b", keys: ownKeys, isOwn: (key) => isOwnKey(TENANT_B, key, "k") },
    ...overrides,
  };
}

const failed = (i: IsolationInput) => isolationVerdicts(i).filter((v) => !v.pass);

describe("chaos tenant scenarios: the crossing checks", () => {
  it("pass when every refusal was a refusal, B holds only its keys and both tenants reach their limits", () => {
    expect(failed(input())).toEqual([]);
  });

  it("fail when an attempt that names B's state was accepted even once", () => {
    const crossing = input({ outcomes: [outcome("redis: HSET of B's rule configuration", true, { accepted: 1 })] });
    expect(failed(crossing)).toMatchObject([{ rule: "isolation", detail: expect.stringContaining("HSET") }]);
  });

  it("fail when an attempt was never answered (a run that judged nothing)", () => {
    const silent = input({ outcomes: [outcome("redis: FLUSHALL", true, { refused: 0, unanswered: 30 })] });
    expect(failed(silent)).toMatchObject([{ rule: "isolation", detail: expect.stringContaining("never answered") }]);
  });

  it("fail when B's namespace holds a key its own instances never make", () => {
    const foreign = `tg:t:b:q:{${rule}.0}:k:${hostileSpellings(rule, "k", TENANT_B).braces}`;
    const crossed = input({ victim: { ...input().victim, keys: [...ownKeys, foreign] } });
    expect(failed(crossed)).toMatchObject([{ rule: "isolation", detail: expect.stringContaining(foreign) }]);
  });

  it("fail when B gets half its limit (the two tenants counted in one key), pass at the least it must reach", () => {
    const shared = input({ utilisations: [{ tenant: "tenant-b", value: 0.5, min: 0.8 }] });
    expect(failed(shared)).toMatchObject([{ rule: "isolation", detail: expect.stringContaining("tenant-b") }]);
    expect(failed(input({ utilisations: [{ tenant: "tenant-b", value: 0.8, min: 0.8 }] }))).toEqual([]);
  });

  it("fail when a tenant's rule was not restored in its namespace after the data loss", () => {
    const keys = [tenantConfigKey(TENANT_A, rule), tenantConfigKey(TENANT_B, rule)];
    expect(failed(input({ required: { keys, found: keys } }))).toEqual([]);
    expect(failed(input({ required: { keys, found: [keys[1] as string] } }))).toMatchObject([
      { rule: "restore", detail: expect.stringContaining("tg:t:a:") },
    ]);
  });
});

describe("chaos tenant scenarios: what counts as B's own key and as a refusal", () => {
  it("takes B's rule keys and its load key as its own, and nothing of A nor any other key text", () => {
    for (const key of ownKeys) expect(isOwnKey(TENANT_B, key, "k"), key).toBe(true);
    expect(isOwnKey(TENANT_B, `tg:t:a:q:{${rule}.0}:k:k`, "k")).toBe(false);
    expect(isOwnKey(TENANT_B, `tg:t:b:q:{${rule}.0}:k:k2`, "k")).toBe(false);
    expect(isOwnKey(TENANT_B, `tg:t:b:q:{${rule}.0}:k:tg:t:b:q:{${rule}.0}:k:k`, "k")).toBe(false);
  });

  it("counts 400, 403 and NOPERM as refusals, and an unreachable store or a 500 as not answered", () => {
    expect(isRefusal(new SyncRejectedError("POST: 403", { status: 403 }))).toBe(true);
    expect(isRefusal(new SyncRejectedError("POST: 400", { status: 400 }))).toBe(true);
    expect(isRefusal(new Error("NOPERM this user has no permissions to access one of the keys"))).toBe(true);
    expect(isRefusal(new StoreUnreachableError("POST: 503"))).toBe(false);
    expect(isRefusal(new SyncRejectedError("POST: 409", { status: 409 }))).toBe(false);
    expect(isRefusal(new Error("CLUSTERDOWN The cluster is down"))).toBe(false);
  });
});
