// The request/response examples of the docs that a test runs against the local stack, and the moment they
// are dated: the examples test pins the functions' clock there, so the page keeps readable absolute times
// and passes in any year.
import { readFileSync } from "node:fs";

/** 2026-11-22 05:00:00 UTC: every `at` of docs/api.md is this or a few seconds later. */
export const EXAMPLES_NOW = Date.UTC(2026, 10, 22, 5, 0, 0);

/** The docs whose examples a test runs (docs/api.md, by test/integration/api-examples.test.ts). */
export const EXECUTED_DOCS = ["docs/api.md"] as const;

export interface DocExample {
  method: string;
  path: string;
  body: string;
  status: number;
  headers: [string, string][];
  reply: unknown;
}

/** A request is a ```http block (method and path, then the body); its reply the ```json block after it: the
 * status, then any header lines shown (`Name: value`), then the JSON body. */
export function examplesOf(markdown: string): DocExample[] {
  return [
    ...markdown.matchAll(
      /```http\n([^\n]+)\n?([\s\S]*?)```\s*```json\n(\d{3})\n((?:[A-Za-z-]+: [^\n]*\n)*)([\s\S]*?)```/g,
    ),
  ].map((match) => {
    const [method, path] = (match[1] as string).split(" ");
    return {
      method: method as string,
      path: path as string,
      body: (match[2] as string).trim(),
      status: Number(match[3]),
      headers: (match[4] as string)
        .split("\n")
        .filter(Boolean)
        .map((line) => line.split(": ") as [string, string]),
      reply: JSON.parse(match[5] as string) as unknown,
    };
  });
}

export function readDoc(path: string): string {
  return readFileSync(new URL(`../../${path}`, import.meta.url), "utf8");
}

/**
 * Numbers that read as an absolute time in ms since the epoch (2001-09-09 to 2100-01-01): 13 digits from
 * 1e12. A test or a doc that carries one depends on the date unless a clock is pinned to it.
 */
export function epochLiterals(text: string): number[] {
  return [...text.matchAll(/(?<![\d.])(\d{13})(?![\d.])/g)]
    .map((match) => Number(match[1]))
    .filter((value) => value >= 1e12 && value < Date.UTC(2100, 0, 1));
}

/** Absolute calendar dates written in code: `Date.UTC(2026, …)`, `new Date("2026-…")`, `Date.parse("…")`. */
export function calendarLiterals(text: string): string[] {
  return [...text.matchAll(/Date\.UTC\(\s*\d{4}|new Date\(\s*["'`]\d{4}-|Date\.parse\(\s*["'`]\d{4}-/g)].map(
    (match) => match[0],
  );
}
