// The policy's `quotas` section (Quotas mode rules): its schema, read by the policy parser, and the
// compiled form the Quotas server publishes to Redis, each rule with a config version that changes
// whenever the rule does.
import { z } from "zod";
import { encodeRule, MAX_SLOT_GROUPS, type QuotaRule } from "../../../sdk/src/protocol/index.ts";
import { parseDuration } from "./duration.ts";

export const MAX_QUOTA_RULES = 64;
const DAY_MS = 86_400_000;
/**
 * Without `leaseMs`: strict tokens live 200 ms, approximate allowances 1 s. A client treats a strict lease as
 * ended one tick (its jittered sync interval, 40-60 ms by default) early, so a lease must outlive a few ticks
 * to be spent at all: 50 ms, the earlier default, left the SDK's default loop nothing to spend.
 */
const DEFAULT_LEASE_MS = { strict: 200, approximate: 1000 } as const;
/**
 * Without `fallback`: strict denies (what an instance admits without the store is counted by nobody, so only
 * `deny` keeps "never over the limit"); approximate takes its safe share of the limit.
 */
const DEFAULT_FALLBACK = { strict: "deny", approximate: "share" } as const;

const quotaWindow = z.string().superRefine((text, ctx) => {
  const ms = parseDuration(text);
  if (ms === undefined) ctx.addIssue({ code: "custom", message: 'expected e.g. "1s"' });
  else if (ms < 1000 || ms > DAY_MS) ctx.addIssue({ code: "custom", message: "expected a window from 1s to 1d" });
});

export const quotaRuleSchema = z
  .strictObject({
    name: z.string().regex(/^[a-z0-9][a-z0-9_.-]{0,63}$/, 'expected a rule name of a-z, 0-9, "_", "." or "-"'),
    mode: z.enum(["strict", "approximate"]),
    limits: z
      .array(
        z.strictObject({ window: quotaWindow, max: z.int("expected an integer from 1").min(1).max(1_000_000_000) }),
      )
      .min(1)
      .max(4),
    leaseMs: z.int().min(10).max(60_000).optional(),
    fallback: z.enum(["share", "allow", "deny"]).optional(),
    slotGroups: z.int().min(1).max(MAX_SLOT_GROUPS).optional(),
  })
  .superRefine((rule, ctx) => {
    const windows = rule.limits.map((limit) => parseDuration(limit.window) ?? 0);
    windows.forEach((ms, i) => {
      if (windows.indexOf(ms) !== i)
        ctx.addIssue({ code: "custom", path: ["limits", i, "window"], message: "duplicate window" });
    });
    // a strict lease pads every window (grants count over W + lease): past W/2 it wastes most of it
    const lease = rule.leaseMs ?? DEFAULT_LEASE_MS[rule.mode];
    if (rule.mode === "strict" && lease * 2 > Math.min(...windows))
      ctx.addIssue({ code: "custom", path: ["leaseMs"], message: "expected at most half the shortest window" });
    // admissions under a share are invisible to the store: a strict rule would pass its limit in an outage
    if (rule.mode === "strict" && rule.fallback === "share")
      ctx.addIssue({
        code: "custom",
        path: ["fallback"],
        message: 'a strict rule cannot fall back to "share" (uncounted admissions); expected "deny" or "allow"',
      });
  });

export const quotaRulesSchema = z
  .array(quotaRuleSchema)
  .max(MAX_QUOTA_RULES)
  .superRefine((rules, ctx) => {
    const names = rules.map((rule) => rule.name);
    names.forEach((name, i) => {
      if (names.indexOf(name) !== i)
        ctx.addIssue({ code: "custom", path: [i, "name"], message: `duplicate quota rule "${name}"` });
    });
  });

export type QuotaRuleDocument = z.output<typeof quotaRuleSchema>;

export interface PublishedQuotaRule {
  rule: QuotaRule;
  /** `<policy version>.<hash of the rule>`: any change to the rule changes it, even with the same policy version. */
  version: string;
}

/** The rules by name, ready for the sync script (windows in ms, defaults filled in). */
export function compileQuotaRules(
  policyVersion: string,
  documents: readonly QuotaRuleDocument[],
): ReadonlyMap<string, PublishedQuotaRule> {
  return new Map(
    documents.map((document) => {
      const rule: QuotaRule = {
        mode: document.mode,
        limits: document.limits.map((limit) => ({ windowMs: parseDuration(limit.window) as number, max: limit.max })),
        leaseMs: document.leaseMs ?? DEFAULT_LEASE_MS[document.mode],
        fallback: document.fallback ?? DEFAULT_FALLBACK[document.mode],
        slotGroups: document.slotGroups ?? 1,
      };
      return [document.name, { rule, version: `${policyVersion}.${fnv1a(encodeRule(rule)).toString(36)}` }];
    }),
  );
}

function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193);
  return hash >>> 0;
}
