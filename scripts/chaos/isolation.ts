// The crossing checks of the tenant scenarios, from what came out alone: each tenant's admissions against its
// own limit (the window rule, per tenant, in verdicts.ts), and here: B still gets its limit beside A (a key
// shared with A would give each at most half), every attempt of A's hostile instance that must be refused
// was, and B's namespace in Redis holds nothing but B's own keys (a hostile spelling that ran is in A's).
import type { HostileOutcome } from "./hostile.ts";
import type { Verdict } from "./verdicts.ts";

export interface IsolationInput {
  outcomes: readonly HostileOutcome[];
  /** Per tenant: its utilisation over the span where it is judged, and the least it must reach. */
  utilisations: readonly { tenant: string; value: number | undefined; min: number }[];
  /** Every key found under the watched tenant's namespace, and which of them its own instances make. */
  victim: { tenant: string; keys: readonly string[]; isOwn: (key: string) => boolean };
  /** Keys that must exist when the run ends (each tenant's rule configuration after a restore). */
  required?: { keys: readonly string[]; found: readonly string[] };
}

const percent = (x: number) => `${(x * 100).toFixed(1)} %`;

export function isolationVerdicts(input: IsolationInput): Verdict[] {
  const verdicts: Verdict[] = [];
  for (const { tenant, value, min } of input.utilisations) {
    verdicts.push({
      rule: "isolation",
      pass: value !== undefined && value >= min,
      detail: `${tenant}: utilisation ${value === undefined ? "none" : percent(value)} of its own limit (at least ${percent(min)})`,
    });
  }
  const crossed = input.outcomes.filter((o) => o.mustRefuse && o.accepted > 0);
  const unjudged = input.outcomes.filter((o) => o.refused + o.accepted === 0);
  const refused = input.outcomes.reduce((sum, o) => sum + o.refused, 0);
  verdicts.push({
    rule: "isolation",
    pass: crossed.length === 0 && unjudged.length === 0,
    detail:
      crossed.length > 0
        ? `accepted though it names another tenant's state: ${crossed.map((o) => `${o.attempt} (${o.accepted}×)`).join("; ")}`
        : unjudged.length > 0
          ? `never answered, so not judged: ${unjudged.map((o) => `${o.attempt} (${o.lastError ?? "no reply"})`).join("; ")}`
          : `${input.outcomes.length} hostile spellings, ${refused} refusals, none crossing`,
  });
  const foreign = input.victim.keys.filter((key) => !input.victim.isOwn(key));
  verdicts.push({
    rule: "isolation",
    pass: foreign.length === 0,
    detail:
      foreign.length === 0
        ? `${input.victim.tenant}'s namespace holds only its own ${input.victim.keys.length} keys`
        : `${input.victim.tenant}'s namespace holds keys it never wrote: ${foreign.slice(0, 5).join(", ")}`,
  });
  if (input.required) {
    const found = new Set(input.required.found);
    const missing = input.required.keys.filter((key) => !found.has(key));
    verdicts.push({
      rule: "restore",
      pass: missing.length === 0,
      detail:
        missing.length === 0 ? "every tenant's rule restored in its namespace" : `not restored: ${missing.join(", ")}`,
    });
  }
  return verdicts;
}
