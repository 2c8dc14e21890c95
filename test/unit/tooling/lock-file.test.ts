// `npm ci` refuses a lock file that lacks an entry for any optional dependency, even one for another
// platform: a lock regenerated where a registry serves only this platform's binaries breaks every fresh clone.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

interface LockEntry {
  optionalDependencies?: Record<string, string>;
}

const lock = JSON.parse(readFileSync(new URL("../../../package-lock.json", import.meta.url), "utf8")) as {
  packages: Record<string, LockEntry>;
};

/** Every optional dependency named in the lock that has no entry of its own (where npm would look for it). */
function missingOptionalEntries(packages: Record<string, LockEntry>): string[] {
  const missing: string[] = [];
  for (const [path, entry] of Object.entries(packages)) {
    for (const name of Object.keys(entry.optionalDependencies ?? {})) {
      if (!candidates(path, name).some((candidate) => candidate in packages))
        missing.push(`${name} (of ${path || "the root"})`);
    }
  }
  return missing;
}

/** Where Node's resolution looks for `name` from the package at `path`: its own node_modules, then each ancestor's. */
function candidates(path: string, name: string): string[] {
  const parts = path === "" ? [] : path.split("/node_modules/");
  const found: string[] = [];
  for (let depth = parts.length; depth >= 0; depth--) {
    const base = parts.slice(0, depth).join("/node_modules/");
    found.push(`${base ? `${base}/` : ""}node_modules/${name}`);
  }
  return found;
}

describe("package-lock.json", () => {
  it("has an entry for every optional dependency, whatever its platform", () => {
    expect(missingOptionalEntries(lock.packages)).toEqual([]);
  });

  it("is caught when a platform package's entry is missing", () => {
    const packages = { "node_modules/tool": { optionalDependencies: { "tool-darwin-arm64": "1.0.0" } } };
    expect(missingOptionalEntries(packages)).toEqual(["tool-darwin-arm64 (of node_modules/tool)"]);
  });

  it("finds an entry beside an ancestor, where Node's resolution finds it", () => {
    const packages = {
      "node_modules/kit": {},
      "node_modules/kit/node_modules/fs-helper": {},
      "node_modules/kit/node_modules/json": { optionalDependencies: { "fs-helper": "4.0.0", absent: "1.0.0" } },
    };
    expect(missingOptionalEntries(packages)).toEqual(["absent (of node_modules/kit/node_modules/json)"]);
  });
});
