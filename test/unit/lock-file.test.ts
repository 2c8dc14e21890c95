// `npm ci` refuses a lock file that lacks an entry for any optional dependency, even one for another
// platform: a lock regenerated where a registry serves only this platform's binaries breaks every fresh clone.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

interface LockEntry {
  optionalDependencies?: Record<string, string>;
}

const lock = JSON.parse(readFileSync(new URL("../../package-lock.json", import.meta.url), "utf8")) as {
  packages: Record<string, LockEntry>;
};

/** Every optional dependency named in the lock that has no entry of its own (where npm would look for it). */
export function missingOptionalEntries(packages: Record<string, LockEntry>): string[] {
  const missing: string[] = [];
  for (const [path, entry] of Object.entries(packages)) {
    for (const name of Object.keys(entry.optionalDependencies ?? {})) {
      const nested = `${path ? `${path}/` : ""}node_modules/${name}`;
      if (!(nested in packages) && !(`node_modules/${name}` in packages))
        missing.push(`${name} (of ${path || "the root"})`);
    }
  }
  return missing;
}

describe("package-lock.json", () => {
  it("has an entry for every optional dependency, whatever its platform", () => {
    expect(missingOptionalEntries(lock.packages)).toEqual([]);
  });

  it("is caught when a platform package's entry is missing", () => {
    const packages = { "node_modules/tool": { optionalDependencies: { "tool-darwin-arm64": "1.0.0" } } };
    expect(missingOptionalEntries(packages)).toEqual(["tool-darwin-arm64 (of node_modules/tool)"]);
  });
});
