// How the bench prints its tables: numbers as the tables show them, the run's date, and a table written
// into its marked place in a doc.
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";

/** A whole number with thousands separators: 12,345. */
export const n = (value: number) => Math.round(value).toLocaleString("en-US");

/** Today's date, as the tables' "Measured" line gives it (UTC). */
export const today = () => new Date().toISOString().slice(0, 10);

/**
 * Replaces the text between the markers `start` and `end` of the file at `path` with `body`, on lines of its own,
 * then lets the formatter pad the file's tables, so the check that runs in `npm test` finds nothing to rewrite.
 */
export function replaceBetween(path: string, start: string, end: string, body: string): void {
  const text = readFileSync(path, "utf8");
  const from = text.indexOf(start);
  const to = text.indexOf(end);
  if (from < 0 || to < from) throw new Error(`${path} has no ${start} ... ${end} section`);
  writeFileSync(path, `${text.slice(0, from + start.length)}\n${body}\n${text.slice(to)}`);
  const biome = createRequire(import.meta.url).resolve("@biomejs/biome/bin/biome");
  execFileSync(process.execPath, [biome, "format", "--write", path], { stdio: "ignore" });
}
