// Every path of the repository a doc names in backticks exists: the docs describe the tree as it is.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../../..", import.meta.url));
const ROOTS = ["functions", "sdk", "lua", "scripts", "infra", "test", "docs", "patches", "bin", "examples", ".ci"];

/** Backticked repository paths in a Markdown text (no placeholders or globs: `lua/<name>.lua` is a pattern). */
function namedPaths(markdown: string): string[] {
  return [...markdown.matchAll(/`([^`\s]+)`/g)]
    .map((match) => (match[1] as string).replace(/[:,.]$/, ""))
    .filter((path) => ROOTS.some((top) => path.startsWith(`${top}/`)))
    .filter((path) => !/[<>*{}|]|\.\.\./.test(path));
}

function missing(paths: readonly string[], exists: (path: string) => boolean): string[] {
  return paths.filter((path) => !exists(path.split(/[#:]/)[0] as string));
}

const docs = [
  "README.md",
  "CHANGELOG.md",
  ...readdirSync(join(root, "docs"), { recursive: true })
    .map(String)
    .filter((name) => name.endsWith(".md"))
    .map((name) => `docs/${name}`),
];

describe("paths the docs name", () => {
  it("finds backticked paths and skips patterns", () => {
    expect(
      namedPaths("see `lua/cap-sends/`, `test/x.test.ts:12`, `lua/<name>.lua`, `npm test`, `sdk/src/*.ts`"),
    ).toEqual(["lua/cap-sends/", "test/x.test.ts:12"]);
  });

  it("flags a path that is not in the tree, and passes one that is", () => {
    const tree = new Set(["lua/cap-sends/", "test/x.test.ts"]);
    expect(missing(["lua/cap-sends/", "test/x.test.ts:12", "lua/cap-sends.lua"], (path) => tree.has(path))).toEqual([
      "lua/cap-sends.lua",
    ]);
  });

  it("names only paths that exist, in README.md, CHANGELOG.md's Unreleased section and docs/", () => {
    for (const doc of docs) {
      let text = readFileSync(join(root, doc), "utf8");
      // the changelog's released sections speak of the tree as it was
      if (doc === "CHANGELOG.md") text = text.slice(0, text.search(/^## \[\d/m));
      expect(
        missing(namedPaths(text), (path) => existsSync(join(root, path))),
        doc,
      ).toEqual([]);
    }
  });
});
