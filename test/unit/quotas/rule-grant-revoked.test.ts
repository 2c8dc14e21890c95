// A rule's grant revoked from some tenants (the edit behind revokeQuotaRule): the rule stays in the policy for
// the others, the revoked tenants no longer sync it (nor quota-sync when it was their last rule), and a
// tenant the policy lacks is named.
import { describe, expect, it } from "vitest";
import { parsePolicyText } from "../../../functions/core/capping/policy.ts";
import { withoutQuotaRuleGrant } from "../../../functions/core/capping/policy-edits.ts";
import { ValidationError } from "../../../functions/core/shared/errors.ts";

const tenant = (name: string, quotaRules: string[]) => ({
  name,
  namespace: name,
  principals: [`arn:aws:iam::111122223333:user/${name}`],
  operations: ["limit", "quota-sync"],
  quotaRules,
});
const text = JSON.stringify({
  version: "g.1",
  channels: ["push"],
  segments: [],
  default: { name: "rest", caps: {} },
  quotas: [
    { name: "api", mode: "strict", limits: [{ window: "1s", max: 10 }] },
    { name: "search", mode: "strict", limits: [{ window: "1s", max: 10 }] },
  ],
  tenants: [tenant("a", ["api"]), tenant("b", ["api", "search"])],
});
const current = { text, policy: parsePolicyText(text) };
const revoked = async (tenants: string[]) => parsePolicyText(await withoutQuotaRuleGrant("api", tenants)(current));

describe("a quota rule's grant revoked", () => {
  it("keeps the rule for the other tenants and takes quota-sync from a tenant that synced nothing else", async () => {
    const policy = await revoked(["a"]);
    expect([...policy.quotas.keys()].sort()).toEqual(["api", "search"]);
    const [a, b] = policy.tenancy.list();
    expect([...(a?.quotaRules ?? [])]).toEqual([]);
    expect(a?.operations.has("quota-sync")).toBe(false);
    expect([...(b?.quotaRules ?? [])].sort()).toEqual(["api", "search"]);
    expect(policy.version).not.toBe("g.1");
  });

  it("leaves a tenant's other rules when it syncs more than the one revoked", async () => {
    const [, b] = (await revoked(["b"])).tenancy.list();
    expect([...(b?.quotaRules ?? [])]).toEqual(["search"]);
    expect(b?.operations.has("quota-sync")).toBe(true);
  });

  it("names --tenant for a tenant the policy lacks", async () => {
    await expect(revoked(["nobody"])).rejects.toThrow(ValidationError);
    await expect(revoked(["nobody"])).rejects.toThrow(/--tenant.*no tenant "nobody"/);
  });
});
