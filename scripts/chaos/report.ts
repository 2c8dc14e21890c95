// The chaos grid's table: nemesis × mode × transport with the worst sliding window against its bound,
// utilisation, denials under the limit and recovery; known failures marked, not hidden.
import type { ScenarioResult } from "./run-scenario.ts";

const pct = (x: number | undefined) => (x === undefined ? "—" : `${Math.round(x * 100)} %`);

function worstCell(result: ScenarioResult): string {
  const worst = result.check.figures.worst;
  if (!worst) return "0";
  const over = worst.bound > 0 ? (worst.admitted / worst.bound - 1) * 100 : Number.POSITIVE_INFINITY;
  const sign = over > 0 ? "+" : "";
  const ratio = Number.isFinite(over) ? ` (${sign}${over.toFixed(1)} %)` : "";
  return `${worst.admitted} of ${Math.round(worst.bound * 10) / 10}${ratio}`;
}

function recoveryCell(result: ScenarioResult): string {
  const { recoveryMs, recoveryMeasured } = result.check.figures;
  if (!recoveryMeasured) return "—";
  return recoveryMs === undefined ? "not in the run" : `${Math.round(recoveryMs)} ms`;
}

export function verdictCell(result: ScenarioResult): string {
  if (result.check.pass) return result.known ? "pass (listed as known to fail)" : "pass";
  const failed = result.check.verdicts
    .filter((v) => !v.pass)
    .map((v) => v.rule)
    .join(", ");
  return `${result.known ? "FAIL (known)" : "**FAIL**"}: ${failed}`;
}

export function gridTable(results: readonly ScenarioResult[]): string {
  const rows = results.map((r) => {
    const f = r.check.figures;
    return [
      r.scenario.tenants ? `two-tenants/${r.scenario.nemesis.name}` : r.scenario.nemesis.name,
      r.scenario.mode,
      r.scenario.transport,
      worstCell(r),
      pct(f.utilisation),
      `${f.underLimit} of ${f.judged}`,
      recoveryCell(r),
      verdictCell(r),
    ];
  });
  const header = [
    "Nemesis",
    "Mode",
    "Transport",
    "Worst window (admitted of bound)",
    "Utilisation",
    "Denied under the limit",
    "Recovery",
    "Verdict",
  ];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] as string).length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i] as number)).join(" | ")} |`;
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n");
}

/** The failing verdicts of each failed scenario, one line each. */
export function failures(results: readonly ScenarioResult[]): string[] {
  return results
    .filter((r) => !r.check.pass)
    .map(
      (r) =>
        `${r.scenario.id}: ${r.check.verdicts
          .filter((v) => !v.pass)
          .map((v) => `${v.rule}: ${v.detail}`)
          .join("; ")}${r.known ? ` (known: ${r.known})` : ""}`,
    );
}
