// The tables of the campaign pipeline's and the check API's scenarios: what came out of each run, judged
// against the contract; known failures marked, not hidden.
import type { ProductResult } from "./product-grid.ts";

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] as string).length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i] as number)).join(" | ")} |`;
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n");
}

export function productVerdictCell(result: ProductResult): string {
  if (result.check.pass) return result.known ? "pass (listed as known to fail)" : "pass";
  const failed = result.check.verdicts
    .filter((v) => !v.pass)
    .map((v) => v.rule)
    .join(", ");
  return `${result.known ? "FAIL (known)" : "**FAIL**"}: ${failed}`;
}

const nemesisOf = (result: ProductResult) => result.id.slice(result.id.indexOf("/") + 1);
const dash = "—";

export function pipelineTable(results: readonly ProductResult[]): string {
  const rows = results.flatMap((r) => {
    if (r.product !== "pipeline") return [];
    const f = r.check.figures;
    if (!f) return [[nemesisOf(r), dash, dash, dash, dash, dash, dash, dash, dash, productVerdictCell(r)]];
    return [
      [
        nemesisOf(r),
        String(f.pushedSends),
        `${f.delivered} (+${f.repeats})`,
        String(f.capped),
        String(f.deadLettered),
        f.worst
          ? `${f.worst.sends} of ${f.worst.cap.max} (${f.worst.cap.channel}/${f.worst.cap.windowMs / 1000} s)`
          : "0",
        String(f.windowsOverMax),
        String(f.lost),
        String(f.countedTwice + f.badDedupe),
        productVerdictCell(r),
      ],
    ];
  });
  return table(
    [
      "Nemesis",
      "Pushed sends",
      "Delivered (+ repeats)",
      "Capped",
      "Dead letters",
      "Fullest window (sends of max)",
      "(user, cap) over max",
      "Lost",
      "Counted twice",
      "Verdict",
    ],
    rows,
  );
}

/** The quiet-hours family: what was held, deferred and re-decided, and the contract's verdicts. */
export function quietTable(results: readonly ProductResult[]): string {
  const rows = results.flatMap((r) => {
    if (r.product !== "pipeline-quiet") return [];
    const f = r.check.figures;
    if (!f) return [[nemesisOf(r), dash, dash, dash, dash, dash, dash, dash, dash, productVerdictCell(r)]];
    return [
      [
        nemesisOf(r),
        `${f.pushedSends} (${f.pushedInQuiet})`,
        `${f.delivered} (+${f.repeats})`,
        `${f.deferredQuiet} (${f.deferredDelivered})`,
        String(f.deferredByCap),
        `${f.dropped}, ${f.quiet}, ${f.capped}`,
        String(f.deadLettered),
        String(f.deliveredInQuiet + f.deliveredEarly + f.pastBound + f.droppedWithinBound),
        `${f.lost}, ${f.badDedupe}, ${f.windowsOverMax}`,
        productVerdictCell(r),
      ],
    ];
  });
  return table(
    [
      "Nemesis",
      "Pushed sends (at in quiet hours)",
      "Delivered (+ repeats)",
      "Deferred by quiet hours (delivered after)",
      "Deferred by a cap",
      "Dropped, quiet, capped",
      "Dead letters",
      "Quiet or deferral breaches",
      "Lost, bad dedupe, windows over max",
      "Verdict",
    ],
    rows,
  );
}

export function checkApiTable(results: readonly ProductResult[]): string {
  const rows = results.flatMap((r) => {
    if (r.product !== "check-api") return [];
    const f = r.check.figures;
    if (!f) return [[nemesisOf(r), dash, dash, dash, dash, dash, dash, dash, productVerdictCell(r)]];
    return [
      [
        nemesisOf(r),
        String(f.answered),
        String(f.allowed),
        String(f.denied),
        String(f.unavailable),
        String(f.passedDenied),
        String(f.afterLifetime),
        String(f.deniedAllowed),
        productVerdictCell(r),
      ],
    ];
  });
  return table(
    [
      "Nemesis",
      "Requests",
      "Allowed",
      "Denied",
      "503 or no answer",
      "Allowed that the contract denies",
      "Allowed once a state's lifetime was over",
      "Denied that it allows",
      "Verdict",
    ],
    rows,
  );
}

/** The failing verdicts of each failed scenario, one line each. */
export function productFailures(results: readonly ProductResult[]): string[] {
  return results
    .filter((r) => !r.check.pass)
    .map(
      (r) =>
        `${r.id}: ${r.check.verdicts
          .filter((v) => !v.pass)
          .map((v) => `${v.rule}: ${v.detail}`)
          .join("; ")}${r.known ? ` (known: ${r.known})` : ""}`,
    );
}
