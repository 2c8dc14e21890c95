// A run's figures and its verdicts: what the checker measured from the history, and which of the contract's
// rules the scenario judges (the window bound always; the others where the contract promises them).
import { denialsUnderLimit, recoveryMs, utilisation, type WorstWindow, worstWindow } from "./checker.ts";
import type { ContractPhase, History } from "./contract.ts";

export interface Expectations {
  /** Denials under the limit allowed, as a share of the decisions judged (0: none); absent: reported only. */
  underLimitShare?: number;
  /** Fault spans in which degraded mode may deny under the limit (not judged there). */
  faultSpans?: [number, number][];
  /** Lowest utilisation allowed over [from, to); absent: reported only. */
  utilisation?: { min: number; from: number; to: number };
  /** When the fault ended (recovery is measured from it). */
  healAt?: number;
  /** Longest recovery allowed, ms; absent: reported only. */
  recoveryMs?: number;
}

export interface Verdict {
  /** "run": the scenario itself failed (a nemesis or the harness threw). */
  /** "isolation", "restore": the tenant scenarios' crossing checks (isolation.ts). */
  rule: "window" | "under-limit" | "utilisation" | "recovery" | "run" | "isolation" | "restore";
  pass: boolean;
  detail: string;
}

export interface Figures {
  worst: WorstWindow | undefined;
  admitted: number;
  offered: number;
  denied: number;
  underLimit: number;
  judged: number;
  utilisation: number | undefined;
  /** From the fault's end to a full window again; undefined: not measured (no fault) or never. */
  recoveryMs: number | undefined;
  recoveryMeasured: boolean;
}

export interface CheckResult {
  figures: Figures;
  verdicts: Verdict[];
  pass: boolean;
}

const percent = (x: number) => `${(x * 100).toFixed(1)} %`;

export function check(history: History, phases: readonly ContractPhase[], expect: Expectations = {}): CheckResult {
  const worst = worstWindow(history, phases);
  const denials = denialsUnderLimit(history, phases, expect.faultSpans ?? []);
  const span = expect.utilisation ?? { from: history.startAt, to: history.endAt };
  const figures: Figures = {
    worst,
    admitted: history.decisions.filter((d) => d.allowed).length,
    offered: history.decisions.length,
    denied: denials.denied,
    underLimit: denials.underLimit,
    judged: denials.judged,
    utilisation: utilisation(history, phases, span.from, span.to),
    recoveryMs: expect.healAt === undefined ? undefined : recoveryMs(history, phases, expect.healAt),
    recoveryMeasured: expect.healAt !== undefined,
  };
  const verdicts: Verdict[] = [
    worst === undefined
      ? { rule: "window", pass: true, detail: "nothing admitted" }
      : {
          rule: "window",
          pass: worst.admitted <= worst.bound,
          detail: `${worst.admitted} admitted in [${worst.at.toFixed(1)}, +${worst.windowMs}) ms, bound ${worst.bound.toFixed(1)}`,
        },
  ];
  if (expect.underLimitShare !== undefined) {
    const share = denials.judged > 0 ? denials.underLimit / denials.judged : 0;
    verdicts.push({
      rule: "under-limit",
      pass: denials.underLimit === 0 || share <= expect.underLimitShare,
      detail: `${denials.underLimit} of ${denials.judged} decisions after ready() denied under the limit (${percent(share)}, allowed ${percent(expect.underLimitShare)})`,
    });
  }
  if (expect.utilisation) {
    const value = figures.utilisation ?? 0;
    verdicts.push({
      rule: "utilisation",
      pass: value >= expect.utilisation.min,
      detail: `${percent(value)} (at least ${percent(expect.utilisation.min)})`,
    });
  }
  if (expect.recoveryMs !== undefined) {
    const value = figures.recoveryMs;
    verdicts.push({
      rule: "recovery",
      pass: value !== undefined && value <= expect.recoveryMs,
      detail: `${value === undefined ? "never" : `${value} ms`} (at most ${expect.recoveryMs} ms)`,
    });
  }
  return { figures, verdicts, pass: verdicts.every((v) => v.pass) };
}

/** The result of a scenario that could not run to its end. */
export function runFailed(error: unknown): CheckResult {
  const figures: Figures = {
    worst: undefined,
    admitted: 0,
    offered: 0,
    denied: 0,
    underLimit: 0,
    judged: 0,
    utilisation: undefined,
    recoveryMs: undefined,
    recoveryMeasured: false,
  };
  const detail = error instanceof Error ? error.message : String(error);
  return { figures, verdicts: [{ rule: "run", pass: false, detail }], pass: false };
}
