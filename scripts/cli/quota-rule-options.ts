// A quota rule from the options of `tollgate quotas set` (or the console's form, whose fields carry the same
// names and text): numbers are decimal integers as written (Number() would take "0x20", "1e2", "2.0" and ""
// as numbers); their ranges are the rule schema's, checked with the rest of the rule when the policy is.
import type { QuotaRuleDocument } from "../../functions/core/shared/quota-rules.ts";

export interface QuotaRuleOptions {
  mode: string;
  /** `window=max` pairs, e.g. "1s=1000". */
  limit: readonly string[];
  leaseMs?: string;
  fallback?: string;
  slotGroups?: string;
}

/** One problem with one option, named as the CLI names it ("--limit"). */
export interface OptionProblem {
  option: string;
  message: string;
}

/** The rule document the options describe, and what is malformed in them (the rule is usable only when none). */
export function quotaRuleFromOptions(
  name: string,
  options: QuotaRuleOptions,
): { rule: QuotaRuleDocument; problems: OptionProblem[] } {
  const problems: OptionProblem[] = [];
  const integer = (option: string, text: string) => {
    if (/^[0-9]{1,16}$/.test(text)) return Number(text);
    problems.push({ option, message: `expected a decimal integer, got "${text}"` });
    return Number.NaN;
  };
  const limits = options.limit.map((pair) => {
    const [window, max, ...rest] = pair.split("=");
    if (!window || max === undefined || rest.length > 0) {
      problems.push({ option: "--limit", message: `expected window=max, got "${pair}"` });
      return { window: window ?? "", max: Number.NaN };
    }
    return { window, max: integer("--limit", max) };
  });
  const rule = {
    name,
    mode: options.mode,
    limits,
    ...(options.leaseMs === undefined ? {} : { leaseMs: integer("--lease-ms", options.leaseMs) }),
    ...(options.fallback === undefined ? {} : { fallback: options.fallback }),
    ...(options.slotGroups === undefined ? {} : { slotGroups: integer("--slot-groups", options.slotGroups) }),
  } as QuotaRuleDocument;
  return { rule, problems };
}

/** The problems as the CLI prints them: "--limit: ...; --lease-ms: ...". */
export function optionProblemsText(problems: readonly OptionProblem[]): string {
  return problems.map(({ option, message }) => `${option}: ${message}`).join("; ");
}
