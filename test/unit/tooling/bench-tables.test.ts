// A table the bench writes into a doc is padded as the formatter pads it. (Every bench run used to leave
// docs/BENCHMARKS.md failing the format check of the next `npm test`.)
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { replaceBetween } from "../../../scripts/bench/tables.ts";

const root = fileURLToPath(new URL("../../..", import.meta.url));
const biome = createRequire(import.meta.url).resolve("@biomejs/biome/bin/biome");
let dir: string | undefined;

afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

describe("replaceBetween", () => {
  it("writes an unpadded table between the markers and leaves a file the format check accepts", () => {
    dir = mkdtempSync(join(root, "bench-tables-"));
    const doc = join(dir, "doc.md");
    writeFileSync(doc, "# Doc\n\n<!-- t:start -->\nold\n<!-- t:end -->\n\nAfter.\n");
    replaceBetween(doc, "<!-- t:start -->", "<!-- t:end -->", "| row | decisions/s |\n|---|---|\n| a | 1,000 |");
    const text = readFileSync(doc, "utf8");
    expect(text).toContain("| row | decisions/s |\n| --- | ----------- |\n| a   | 1,000       |");
    expect(text).not.toContain("old");
    expect(text).toContain("After.");
    expect(() => execFileSync(process.execPath, [biome, "format", doc], { stdio: "pipe" })).not.toThrow();
  });

  it("refuses a file without the markers and leaves it as it was", () => {
    dir = mkdtempSync(join(root, "bench-tables-"));
    const doc = join(dir, "doc.md");
    writeFileSync(doc, "# Doc\n");
    expect(() => replaceBetween(doc, "<!-- t:start -->", "<!-- t:end -->", "x")).toThrow(/no <!-- t:start -->/);
    expect(readFileSync(doc, "utf8")).toBe("# Doc\n");
  });
});
