// The CLI's usage errors (exit 2, the option or argument named) and its --version; no service is reached.
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, expect, it, vi } from "vitest";
import { runCli } from "../../../scripts/cli.ts";

let dir: string;
let out: string[];
let err: string[];
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "tollgate-cli-usage-"));
  writeFileSync(join(dir, "a.txt"), "1\n2\n");
  writeFileSync(join(dir, "b.txt"), "3\n");
  out = [];
  err = [];
  vi.spyOn(process.stdout, "write").mockImplementation((text) => out.push(String(text)) > 0);
  vi.spyOn(process.stderr, "write").mockImplementation((text) => err.push(String(text)) > 0);
  vi.spyOn(console, "error").mockImplementation((text: string) => err.push(text));
  vi.spyOn(console, "log").mockImplementation((text: string) => out.push(text));
});
afterEach(() => vi.restoreAllMocks());

it("prints the package version with --version and exits 0", async () => {
  const { version } = JSON.parse(readFileSync(join(import.meta.dirname, "../../../package.json"), "utf8"));
  expect(await runCli(["--version"])).toBe(0);
  expect(out.join("").trim()).toBe(version);
});

it("refuses a segment given twice, before writing anything", async () => {
  const outDir = join(dir, "out");
  const a = join(dir, "a.txt");
  expect(await runCli(["segments", "build", "--out", outDir, `new=${a}`, `new=${join(dir, "b.txt")}`])).toBe(2);
  expect(err.join("")).toContain("segment new is given twice");
  expect(existsSync(outDir)).toBe(false);
});

it("refuses a segment name with a path separator, so nothing is written outside --out", async () => {
  const outDir = join(dir, "out");
  for (const name of ["../x", "a/b", "..", "Upper"]) {
    err = [];
    expect(await runCli(["segments", "build", "--out", outDir, `${name}=${join(dir, "a.txt")}`]), name).toBe(2);
    expect(err.join(""), name).toContain("segment names are 1-64 of a-z");
  }
  expect(readdirSync(dir).sort()).toEqual(["a.txt", "b.txt"]);
  expect(await runCli(["segments", "build", "--out", outDir, `ok_1=${join(dir, "a.txt")}`])).toBe(0);
  expect(readdirSync(outDir)).toEqual(["ok_1.roaring"]);
});

it("refuses malformed numbers as usage errors naming the option", async () => {
  const cases: [string[], string][] = [
    [["delivery", "tail", "--queue-url", "http://127.0.0.1:1/0/q", "--max", "abc"], "--max"],
    [["delivery", "tail", "--queue-url", "http://127.0.0.1:1/0/q", "--max", "0"], "--max"],
    [
      ["campaign", "push", "--campaign", "c", "--channel", "push", "--range", "0-1", "--per-message", "0"],
      "--per-message",
    ],
    [["campaign", "push", "--campaign", "c", "--channel", "push", "--range", "0-1", "--at", "soon"], "--at"],
  ];
  for (const [args, option] of cases) {
    err = [];
    expect(await runCli(args), args.join(" ")).toBe(2);
    expect(err.join(""), args.join(" ")).toContain(option);
    expect(err.join(""), args.join(" ")).toContain("expected an integer from");
  }
});

it("keeps exit 1 for what a file holds: user IDs that are not numbers", async () => {
  writeFileSync(join(dir, "bad.txt"), "1\nabc\n");
  expect(await runCli(["segments", "build", "--out", join(dir, "out"), `new=${join(dir, "bad.txt")}`])).toBe(1);
});
