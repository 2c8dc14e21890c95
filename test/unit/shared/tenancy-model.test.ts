// Tenants against a model of the contract (docs/tenants.md), over random tenants, principals and requests:
// a principal acts for the one tenant whose patterns match it (none: unknown_principal; several:
// ambiguous_principal), and then only for what that tenant allows. And whatever a request names, a
// tenant's keys stay under its own namespace: never equal to, nor under, another tenant's.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parsePolicy } from "../../../functions/core/capping/policy.ts";
import { type Intent, OPERATIONS, Tenancy, type TenantDocument } from "../../../functions/core/shared/tenants.ts";
import {
  limitKey,
  quotaKey,
  scopedLimitKey,
  slotGroupPrefix,
  tenantNamespace,
} from "../../../sdk/src/protocol/index.ts";

/** Glob matching written from the contract (`*` any run, `?` one character), by recursion, not a RegExp. */
function globMatches(pattern: string, text: string): boolean {
  if (pattern === "") return text === "";
  const [head, rest] = [pattern[0], pattern.slice(1)];
  if (head === "*") return globMatches(rest, text) || (text !== "" && globMatches(pattern, text.slice(1)));
  if (text === "") return false;
  return (head === "?" || head === text[0]) && globMatches(rest, text.slice(1));
}

type ModelAnswer = string;

/** The contract's answer: a tenant name, or the refusal code. */
function model(tenants: readonly TenantDocument[], arn: string | undefined, intent: Intent): ModelAnswer {
  if (arn === undefined) return "unknown_principal";
  const matching = tenants.filter((t) => t.principals.some((p) => globMatches(p, arn)));
  if (matching.length === 0) return "unknown_principal";
  if (matching.length > 1) return "ambiguous_principal";
  const tenant = matching[0] as TenantDocument;
  if (tenant.operator) return "operation_not_allowed";
  if (!tenant.operations.includes(intent.operation)) return "operation_not_allowed";
  if (intent.changes && tenant.peekOnly) return "operation_not_allowed";
  if (intent.rule !== undefined && !(tenant.quotaRules ?? []).includes(intent.rule)) return "operation_not_allowed";
  return tenant.name;
}

// small alphabets, so that patterns and principals often meet (and sometimes overlap)
const segment = fc.constantFrom("a", "b", "ab", "team-a", "team-b", "x.y", "");
const accounts = fc.constantFrom("111111111111", "222222222222");
const arn = fc
  .tuple(fc.constantFrom("iam", "sts"), accounts, fc.constantFrom("role", "user", "assumed-role"), segment, segment)
  .map(
    ([service, account, kind, name, session]) =>
      `arn:aws:${service}::${account}:${kind}/${name}${session ? `/${session}` : ""}`,
  );
const pattern = fc.oneof(
  arn,
  arn.map((text) => `${text.slice(0, Math.max(13, text.length - 2))}*`),
  arn.map((text) => text.replace(/[ab]/, "?")),
  fc.constant("arn:aws:iam::111111111111:*"),
);
const rules = ["api", "search", "login"];
const tenantDocument = (i: number) =>
  fc
    .record({
      principals: fc.array(pattern, { minLength: 1, maxLength: 3 }),
      operations: fc.subarray([...OPERATIONS], { minLength: 1 }),
      quotaRules: fc.subarray(rules, { minLength: 1 }),
      peekOnly: fc.boolean(),
      operator: fc.boolean(),
    })
    .map(({ operations, quotaRules, peekOnly, operator, principals }): TenantDocument => {
      const syncs = operations.includes("quota-sync");
      const ops = peekOnly ? operations.filter((op) => op !== "frequency-consume") : operations;
      return {
        name: `tenant-${i}`,
        namespace: `ns${i}`,
        principals,
        operations: ops.length > 0 ? ops : ["limit"],
        ...(syncs && ops.includes("quota-sync") ? { quotaRules } : {}),
        peekOnly,
        operator,
      };
    });
const tenantsArb = fc
  .integer({ min: 0, max: 4 })
  .chain((n) => fc.tuple(...Array.from({ length: n }, (_, i) => tenantDocument(i))));
const intentArb: fc.Arbitrary<Intent> = fc.oneof(
  fc.record({
    operation: fc.constantFrom("limit", "limits") as fc.Arbitrary<Intent["operation"]>,
    changes: fc.boolean(),
  }),
  fc
    .boolean()
    .map((consume): Intent => ({ operation: consume ? "frequency-consume" : "frequency-check", changes: consume })),
  fc.constantFrom(...rules, "other").map((rule): Intent => ({ operation: "quota-sync", changes: true, rule })),
);

describe("tenancy against the model of the contract", () => {
  it("answers every principal and request as the model does", () => {
    const seen = new Set<string>();
    fc.assert(
      fc.property(tenantsArb, fc.option(arn, { nil: undefined }), intentArb, (tenants, principal, intent) => {
        const decision = new Tenancy(tenants).authorize(
          principal === undefined ? undefined : { arn: principal },
          intent,
        );
        const answer = "code" in decision ? decision.code : decision.name;
        expect(answer).toBe(model(tenants, principal, intent));
        seen.add(answer.startsWith("tenant-") ? "authorized" : answer);
      }),
      { numRuns: 2000 },
    );
    // the runs met every outcome, not only refusals
    expect([...seen].sort()).toEqual([
      "ambiguous_principal",
      "authorized",
      "operation_not_allowed",
      "unknown_principal",
    ]);
  });

  it("a policy without tenants refuses every principal (default deny)", () => {
    fc.assert(
      fc.property(arn, intentArb, (principal, intent) => {
        const policy = parsePolicy({
          version: "v",
          channels: ["push"],
          segments: [],
          default: { name: "d", caps: {} },
        });
        expect(policy.tenancy.authorize({ arn: principal }, intent)).toMatchObject({ code: "unknown_principal" });
      }),
      { numRuns: 100 },
    );
  });
});

describe("tenant namespaces", () => {
  // braces, prefixes, encoded names, another tenant's namespace spelled out, lone surrogates
  const hostile = fc.oneof(
    fc.string({ maxLength: 40 }),
    fc.constantFrom("{", "}", "%7B", "}{", "tg:t:ns1:rl:{k}:fixed-window", ":t:ns1:", "ns1:k", "\ud800", "%"),
    fc
      .tuple(fc.constantFrom("tg:t:ns0", "tg:t:ns1", "{ns1}", "}:"), fc.string({ maxLength: 10 }))
      .map(([a, b]) => a + b),
  );
  const namespaces = fc.constantFrom("ns0", "ns1", "ns1-x", "n", "ns");

  it("every key a request names stays under its own tenant's namespace, never another's", () => {
    fc.assert(
      fc.property(namespaces, namespaces, hostile, hostile, (mine, other, key, scope) => {
        fc.pre(mine !== other);
        const own = `${tenantNamespace("tg", mine)}:`;
        const theirs = `${tenantNamespace("tg", other)}:`;
        const keys = [limitKey(own.slice(0, -1), "gcra", key), scopedLimitKey(own.slice(0, -1), scope, "gcra", key)];
        if (key.length > 0 && key.length <= 256 && (key as unknown as { isWellFormed(): boolean }).isWellFormed())
          keys.push(quotaKey(slotGroupPrefix(own.slice(0, -1), "api", 0), key));
        for (const built of keys) {
          expect(built.startsWith(own)).toBe(true);
          expect(built.startsWith(theirs)).toBe(false);
        }
      }),
      { numRuns: 2000 },
    );
  });

  it("refuses a tenant namespace with a separator or a brace", () => {
    for (const bad of ["a:b", "{a}", "", "A", "a".repeat(33)]) expect(() => tenantNamespace("tg", bad)).toThrow();
  });
});
