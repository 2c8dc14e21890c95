// The docs stay readable from a fresh clone: every relative link in README.md and docs/ names a file that
// exists inside the repository (and a heading of it, for `#anchor`), and nothing points at a path outside
// it (such as `../shared`).
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");

/** README.md and every Markdown file under docs/, as paths relative to the repository root. */
function docFiles(): string[] {
  const found = ["README.md"];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
      const path = `${dir}/${entry.name}`;
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith(".md")) found.push(path);
    }
  };
  walk("docs");
  return found.sort();
}

/** The targets of the Markdown links `[text](target)` outside fenced code blocks. */
function linkTargets(text: string): string[] {
  const prose = text.replace(/^```[\s\S]*?^```/gm, "");
  return [...prose.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map((match) => match[1] as string);
}

/** The anchors GitHub gives a document's headings: lower case, punctuation dropped, spaces as hyphens. */
function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const found = new Set<string>();
  for (const [, heading] of text.replace(/^```[\s\S]*?^```/gm, "").matchAll(/^#{1,6} (.+)$/gm)) {
    const base = (heading as string)
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    found.add(count === 0 ? base : `${base}-${count}`);
  }
  return found;
}

interface Files {
  exists: (path: string) => boolean;
  read: (path: string) => string;
}
const disk: Files = { exists: existsSync, read: (path) => readFileSync(path, "utf8") };

/** What is wrong with one link of the file at `from` (relative to `repo`), or undefined when it is fine. */
function brokenLink(repo: string, from: string, target: string, files: Files = disk): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return undefined; // a URL
  const [file, anchor] = target.split("#") as [string, string | undefined];
  const path = resolve(repo, dirname(from), decodeURI(file === "" ? from.split("/").pop()! : file));
  const inside = relative(repo, path);
  if (inside === ".." || inside.startsWith(`..${sep}`)) return `${target}: outside the repository`;
  if (!files.exists(path)) return `${target}: no such file`;
  if (anchor !== undefined && path.endsWith(".md") && !anchors(files.read(path)).has(decodeURI(anchor)))
    return `${target}: no such heading`;
  return undefined;
}

/** Mentions of a path outside the repository that a clone does not have, links or not. */
function outsideMentions(text: string): string[] {
  return [...text.matchAll(/(?:^|[\s(`"'])(\.\.\/(?:\.\.\/)*shared\b[^\s)`"']*)/g)].map((match) => match[1] as string);
}

describe("links in README.md and docs/", () => {
  it("finds the links of a document, not the brackets in its code blocks", () => {
    const text = "See [api](docs/api.md#check-api) and [site](https://example.com).\n```ts\nx[0](1)\n```\n";
    expect(linkTargets(text)).toEqual(["docs/api.md#check-api", "https://example.com"]);
  });

  it("accepts a link to a file and heading that exist, and refuses a missing file, heading or a path outside", () => {
    const api = "# API\n## Errors\n### POST /v1/limit: one limit\n## Errors\n```\n# not a heading\n```\n";
    const files: Files = {
      exists: (path) => path === resolve("/repo/docs/api.md"),
      read: () => api,
    };
    expect(brokenLink("/repo", "README.md", "docs/api.md#errors", files)).toBeUndefined();
    expect(brokenLink("/repo", "README.md", "docs/api.md#errors-1", files)).toBeUndefined();
    expect(brokenLink("/repo", "docs/index.md", "api.md#post-v1limit-one-limit", files)).toBeUndefined();
    expect(brokenLink("/repo", "docs/api.md", "#errors", files)).toBeUndefined();
    expect(brokenLink("/repo", "README.md", "https://example.com/x.md", files)).toBeUndefined();
    expect(brokenLink("/repo", "docs/index.md", "api.md#not-a-heading", files)).toBe(
      "api.md#not-a-heading: no such heading",
    );
    expect(brokenLink("/repo", "docs/index.md", "missing.md", files)).toBe("missing.md: no such file");
    expect(brokenLink("/repo", "docs/index.md", "../../shared/DESIGN.md", files)).toBe(
      "../../shared/DESIGN.md: outside the repository",
    );
  });

  it("spots a mention of ../shared whether or not it is a link", () => {
    expect(outsideMentions("read `../shared/DESIGN.md` first")).toEqual(["../shared/DESIGN.md"]);
    expect(outsideMentions("in (../shared/seeds/)")).toEqual(["../shared/seeds/"]);
    expect(outsideMentions("core/shared/keys.ts and functions/core/shared")).toEqual([]);
  });

  it("has no link to a missing file and nothing outside the repository, in any doc", () => {
    const problems: string[] = [];
    for (const file of docFiles()) {
      const text = readFileSync(join(root, file), "utf8");
      for (const target of linkTargets(text)) {
        const problem = brokenLink(root, file, target);
        if (problem) problems.push(`${file}: ${problem}`);
      }
      for (const mention of outsideMentions(text)) problems.push(`${file}: ${mention}: outside the repository`);
    }
    expect(problems).toEqual([]);
  });

  it("keeps README.md short and opens the docs with an index", () => {
    expect(readFileSync(join(root, "README.md"), "utf8").split("\n").length).toBeLessThanOrEqual(201);
    expect(existsSync(join(root, "docs/index.md"))).toBe(true);
  });
});
