// The operator CLI: outputs and exit codes a script can rely on.
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { parseBitmap } from "../../functions/core/segment-index.ts";
import { runCli } from "../../scripts/cli.ts";

let dir: string;
let out: string[];
let err: string[];
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "tollgate-cli-"));
  out = [];
  err = [];
  vi.spyOn(console, "log").mockImplementation((...args) => void out.push(args.join(" ")));
  vi.spyOn(console, "error").mockImplementation((...args) => void err.push(args.join(" ")));
  vi.spyOn(process.stderr, "write").mockImplementation((text) => (err.push(String(text)), true));
});
afterEach(() => vi.restoreAllMocks());

const file = (name: string, text: string) => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};

describe("tollgate CLI", () => {
  it("builds portable bitmaps from ID files", async () => {
    const code = await runCli(["segments", "build", "--out", join(dir, "out"), `new=${file("new.txt", "1\n2\n3\n")}`, `active=${file("a.txt", "10, 11")}`]);
    expect(code).toBe(0);
    expect(parseBitmap(readFileSync(join(dir, "out", "new.roaring")), "new").toArray()).toEqual([1, 2, 3]);
    expect(out.join("\n")).toContain("active.roaring: 2 users");
  });

  it("refuses overlapping segments with exit code 1 and the overlap count", async () => {
    const code = await runCli(["segments", "build", "--out", dir, `a=${file("a.txt", "1 2 3")}`, `b=${file("b.txt", "3 2")}`]);
    expect(code).toBe(1);
    expect(err.join("")).toContain('2 user IDs in both "a" and "b"');
  });

  it("names the file and token of a bad user ID", async () => {
    const path = file("bad.txt", "1\nabc\n");
    expect(await runCli(["segments", "build", "--out", dir, `a=${path}`])).toBe(1);
    expect(err.join("")).toContain(`${path}: "abc" is not a user ID`);
  });

  it("validates a policy: 0 when valid, 1 with every problem by field", async () => {
    const good = {
      version: "1",
      channels: ["push"],
      segments: [],
      default: { name: "rest", caps: { push: [{ window: "1d", max: 1 }] } },
    };
    expect(await runCli(["policy", "validate", file("good.json", JSON.stringify(good))])).toBe(0);
    expect(out.join("")).toContain("valid (version 1; channels push; segments rest)");
    const bad = { ...good, default: { name: "rest", caps: { push: [{ window: "1w", max: -1 }] } } };
    expect(await runCli(["policy", "validate", file("bad.json", JSON.stringify(bad))])).toBe(1);
    expect(err.join("")).toContain('default.caps.push[0].window: expected e.g. "7d"');
    expect(err.join("")).toContain("default.caps.push[0].max:");
  });

  it("exits 1 for a missing file and 2 for a usage error", async () => {
    expect(await runCli(["policy", "validate", join(dir, "missing.json")])).toBe(1);
    expect(await runCli(["policy", "frobnicate"])).toBe(2);
    expect(await runCli(["segments", "build", "a=b.txt"])).toBe(2);
  });
});
