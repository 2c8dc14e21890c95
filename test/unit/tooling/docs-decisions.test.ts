// Decision records (docs/decisions/NNNN-kebab-title.md) stay short and complete: at most 60 lines, a title,
// and the five sections Context, Decision, Consequences, Status and Date, in that order.
import { readdirSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

const dir = new URL("../../../docs/decisions/", import.meta.url);
const SECTIONS = ["Context", "Decision", "Consequences", "Status", "Date"] as const;
const MAX_LINES = 60;

/** What is wrong with one decision record (its file name and text); empty when nothing is. */
function recordProblems(name: string, text: string): string[] {
  const problems: string[] = [];
  if (!/^\d{4}-[a-z0-9]+(?:-[a-z0-9]+)*\.md$/.test(name)) problems.push("name: expected NNNN-kebab-title.md");
  const lines = text.replace(/\n$/, "").split("\n");
  if (lines.length > MAX_LINES) problems.push(`${lines.length} lines: at most ${MAX_LINES}`);
  if (!/^# \S/.test(lines[0] ?? "")) problems.push("the first line is not a `# ` title");
  const headings = lines.filter((line) => line.startsWith("## ")).map((line) => line.slice(3).trim());
  for (const section of SECTIONS) if (!headings.includes(section)) problems.push(`no "## ${section}" section`);
  const order = headings.filter((heading) => (SECTIONS as readonly string[]).includes(heading));
  if (order.join() !== SECTIONS.filter((section) => order.includes(section)).join())
    problems.push(`sections out of order: ${order.join(", ")}`);
  const date = text.match(/^## Date\n+(.*)$/m)?.[1] ?? "";
  if (headings.includes("Date") && !/^\d{4}-\d{2}-\d{2}\b/.test(date)) problems.push("Date: expected YYYY-MM-DD");
  return problems;
}

const complete = [
  "# 0001: A title",
  "",
  ...SECTIONS.flatMap((s) => [`## ${s}`, "", s === "Date" ? "2026-11-22" : "x", ""]),
];

describe("decision records", () => {
  it("passes a complete record and fails one too long, one without a section, one out of order", () => {
    expect(recordProblems("0001-a-title.md", complete.join("\n"))).toEqual([]);
    const long = [...complete, ...Array.from({ length: 60 }, () => "more")].join("\n");
    expect(recordProblems("0001-a-title.md", long)).toEqual([`${complete.length + 60} lines: at most 60`]);
    const noStatus = complete.join("\n").replace("## Status\n", "");
    expect(recordProblems("0001-a-title.md", noStatus)).toContain('no "## Status" section');
    const swapped = complete.join("\n").replace("## Context", "## Tmp").replace("## Decision", "## Context");
    expect(recordProblems("0001-a-title.md", swapped.replace("## Tmp", "## Decision"))).toEqual([
      "sections out of order: Decision, Context, Consequences, Status, Date",
    ]);
    expect(recordProblems("1-Title.md", complete.join("\n"))).toEqual(["name: expected NNNN-kebab-title.md"]);
  });

  // parallel branches take numbers from ranges of their own, so a merge may leave gaps: numbers stay unique
  it("holds every record in docs/decisions to the format, numbered from 0001, each number once", () => {
    const names = readdirSync(dir)
      .filter((name) => name !== "README.md")
      .sort();
    expect(names.length).toBeGreaterThan(0);
    const problems = names.flatMap((name) =>
      recordProblems(name, readFileSync(new URL(name, dir), "utf8")).map((problem) => `${name}: ${problem}`),
    );
    expect(problems).toEqual([]);
    const numbers = names.map((name) => Number(name.slice(0, 4)));
    expect(numbers[0]).toBe(1);
    expect(new Set(numbers).size).toBe(numbers.length);
  });
});
