// The policy's `tenants` section, validated with the rest of the policy: each rule a pass and a fail, the
// failure naming its field.
import { describe, expect, it } from "vitest";
import { parsePolicy } from "../../../functions/core/capping/policy.ts";
import { InvalidPolicyError } from "../../../functions/core/shared/errors.ts";

const tenant = (fields: object = {}) => ({
  name: "checkout",
  namespace: "checkout",
  principals: ["arn:aws:sts::111122223333:assumed-role/checkout-api/*"],
  operations: ["limit", "quota-sync"],
  quotaRules: ["api"],
  ...fields,
});
const policy = (tenants: unknown[]) => ({
  version: "t.1",
  channels: ["push"],
  segments: [],
  default: { name: "rest", caps: {} },
  quotas: [{ name: "api", mode: "approximate", limits: [{ window: "1s", max: 10 }] }],
  tenants,
});

function issuesOf(document: unknown): readonly string[] {
  try {
    parsePolicy(document);
  } catch (error) {
    if (error instanceof InvalidPolicyError) return error.issues;
    throw error;
  }
  return [];
}

describe("tenants in the policy", () => {
  it("takes the documented example's shapes", () => {
    const parsed = parsePolicy(
      policy([
        tenant(),
        tenant({
          name: "marketing",
          namespace: "marketing",
          principals: ["arn:aws:iam::111122223333:role/campaigns"],
          operations: ["frequency-check", "frequency-consume"],
          quotaRules: undefined,
        }),
        tenant({ name: "dash", namespace: "dash", operations: ["limit"], quotaRules: undefined, peekOnly: true }),
      ]),
    );
    expect(parsed.tenancy.list().map((t) => t.name)).toEqual(["checkout", "marketing", "dash"]);
  });

  const refused: [string, unknown[], string][] = [
    [
      "a duplicate namespace",
      [tenant(), tenant({ name: "other" })],
      'tenants[1].namespace: duplicate tenant namespace "checkout"',
    ],
    ["a namespace with a separator", [tenant({ namespace: "a:b" })], "tenants[0].namespace"],
    ["a namespace with a brace", [tenant({ namespace: "{a}" })], "tenants[0].namespace"],
    ["a principal that is no ARN", [tenant({ principals: ["checkout"] })], "tenants[0].principals[0]"],
    ["an unknown operation", [tenant({ operations: ["reset"] })], "tenants[0].operations[0]"],
    ["quota-sync without rules", [tenant({ quotaRules: undefined })], "tenants[0].quotaRules: quota-sync needs"],
    ["rules without quota-sync", [tenant({ operations: ["limit"] })], "tenants[0].quotaRules: only with"],
    [
      "a rule the policy lacks",
      [tenant({ quotaRules: ["nope"] })],
      'tenants[0].quotaRules[0]: unknown quota rule "nope"',
    ],
    [
      "a peek-only consumer",
      [tenant({ operations: ["frequency-consume"], quotaRules: undefined, peekOnly: true })],
      "tenants[0].operations",
    ],
    [
      "the users' caps for two tenants",
      [
        tenant({ operations: ["frequency-check"], quotaRules: undefined }),
        tenant({ name: "b", namespace: "b", operations: ["frequency-consume"], quotaRules: undefined }),
      ],
      "tenants[1].operations: the users' frequency caps are one tenant's (already \"checkout\")",
    ],
    ["an unknown field", [tenant({ namspace: "x" })], "tenants[0]"],
  ];
  for (const [label, tenants, issue] of refused) {
    it(`refuses ${label}, naming the field`, () => {
      expect(issuesOf(policy(tenants)).join("\n")).toContain(issue);
    });
  }
});

describe("a tenant namespace beside the deployment's KEY_NAMESPACE", () => {
  // 40 characters: room for a tenant namespace of 64 - 40 - ":t:".length = 21 characters
  const keyNamespace = "tollgate-production-eu-west-1-shared-ns0";
  const refusal = (namespace: string) => {
    try {
      parsePolicy(policy([tenant({ namespace })]), { keyNamespace });
    } catch (error) {
      if (error instanceof InvalidPolicyError) return error.issues;
      throw error;
    }
    return [];
  };

  it("takes the longest tenant namespace that fits and refuses one character more, naming the field", () => {
    expect(refusal("a".repeat(21))).toEqual([]);
    expect(refusal("a".repeat(22))).toEqual([
      expect.stringMatching(/^tenants\[0\]\.namespace: with KEY_NAMESPACE ".+" .*65 characters.*at most 21/),
    ]);
  });

  it("is not checked without a key namespace (the default's room holds every namespace the schema admits)", () => {
    expect(() => parsePolicy(policy([tenant({ namespace: "a".repeat(32) })]))).not.toThrow();
    expect(() => parsePolicy(policy([tenant({ namespace: "a".repeat(32) })]), { keyNamespace: "tg" })).not.toThrow();
  });
});
