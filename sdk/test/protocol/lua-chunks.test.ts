// Joining a Lua script from its entry and parts (src/protocol/lua-chunks.ts): each include line replaced by its part's
// text, and every way a script cannot be joined refused with the file and line at fault.
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { findLuaEntry, joinLua, LuaChunkError, readLuaChunk } from "../../src/protocol/lua-chunks.ts";

/** A fresh folder holding `files` (path -> text). */
function folderOf(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), "lua-chunks-"));
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(dir, path, ".."), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return dir;
}

const joinError = (entry: string): LuaChunkError => {
  try {
    joinLua(entry);
  } catch (error) {
    if (error instanceof LuaChunkError) return error;
    throw error;
  }
  throw new Error(`${entry} joined`);
};

describe("joinLua", () => {
  it("replaces each include line, newline and all, by its part's text, parts within parts included", () => {
    const dir = folderOf({
      "s/s.lua": '-- head\n--- @include "a"\nlocal x = 1\n--- @include "b.lua"\nreturn x',
      "s/a.lua": '--- @include "inner/c"\nlocal a = 2\n',
      "s/inner/c.lua": "local c = 3\n",
      "s/b.lua": "\nlocal b = 4\n",
    });
    const joined = joinLua(join(dir, "s/s.lua"));
    expect(joined.text).toBe("-- head\nlocal c = 3\nlocal a = 2\nlocal x = 1\n\nlocal b = 4\nreturn x");
    expect(joined.files).toEqual(["s/s.lua", "s/a.lua", "s/inner/c.lua", "s/b.lua"].map((file) => join(dir, file)));
    const at = (file: string, line: number) => ({ file: join(dir, file), line });
    expect(joined.origins).toEqual([
      at("s/s.lua", 1),
      at("s/inner/c.lua", 1),
      at("s/a.lua", 2),
      at("s/s.lua", 3),
      at("s/b.lua", 1),
      at("s/b.lua", 2),
      at("s/s.lua", 5),
    ]);
  });

  it("reads a part named in `parts` from the file given, its origins there, the other parts beside the entry", () => {
    const dir = folderOf({
      "s/s.lua": '--- @include "clock"\n--- @include "a"\nreturn now()',
      "s/clock.lua": "local function now() return 1 end\n",
      "s/a.lua": "local a = 2\n",
      "t/clock.lua": "local function now() return 2 end\n",
    });
    const swapped = joinLua(join(dir, "s/s.lua"), { parts: { clock: pathToFileURL(join(dir, "t/clock.lua")) } });
    expect(swapped.text).toBe("local function now() return 2 end\nlocal a = 2\nreturn now()");
    expect(swapped.files).toEqual(["s/s.lua", "t/clock.lua", "s/a.lua"].map((file) => join(dir, file)));
    expect(swapped.origins[0]).toEqual({ file: join(dir, "t/clock.lua"), line: 1 });
    expect(joinLua(join(dir, "s/s.lua")).text).toBe("local function now() return 1 end\nlocal a = 2\nreturn now()");
  });

  it("leaves a script without includes as it is, byte for byte", () => {
    const text = "-- a comment about --- lines\r\nlocal s = '--- @include'\n\n\nreturn s\n";
    const dir = folderOf({ "one.lua": text });
    expect(joinLua(pathToFileURL(join(dir, "one.lua"))).text).toBe(text);
  });

  it("refuses a part that is missing, naming the including file, its line and the path looked at", () => {
    const dir = folderOf({ "s.lua": 'local x\n--- @include "gone"\n' });
    const error = joinError(join(dir, "s.lua"));
    expect(error.message).toBe(`${join(dir, "s.lua")}:2: part "gone" not found (${join(dir, "gone.lua")})`);
    expect(error.at).toBe(`${join(dir, "s.lua")}:2`);
  });

  it("refuses an include cycle, naming every file in it", () => {
    const dir = folderOf({
      "s.lua": '--- @include "a"\n',
      "a.lua": '--- @include "b"\n',
      "b.lua": 'local b\n--- @include "a"\n',
    });
    const [s, a, b] = ["s.lua", "a.lua", "b.lua"].map((file) => join(dir, file));
    expect(joinError(s as string).message).toBe(`${b}:2: include cycle: ${a} -> ${b} -> ${a}`);
    const self = folderOf({ "s.lua": '--- @include "s"\n' });
    expect(joinError(join(self, "s.lua")).message).toMatch(/s\.lua:1: include cycle: .*s\.lua -> .*s\.lua$/);
  });

  it("refuses a part included a second time (its locals would be declared twice)", () => {
    const dir = folderOf({ "s.lua": '--- @include "a"\n--- @include "a"\n', "a.lua": "local a\n" });
    expect(joinError(join(dir, "s.lua")).message).toBe(`${join(dir, "s.lua")}:2: part "a" is included a second time`);
  });

  it("refuses an include written any other way, which would otherwise be kept as a comment", () => {
    for (const line of [
      '-- @include "a"',
      "--- @include 'a'",
      '---@include "a"',
      '  --- @include "a"',
      '--- @include "a" -- x',
    ]) {
      const dir = folderOf({ "s.lua": `local x\n${line}\n`, "a.lua": "local a\n" });
      expect(joinError(join(dir, "s.lua")).message).toMatch(
        /s\.lua:2: an include is written exactly --- @include "part"/,
      );
    }
  });

  it("refuses a part whose last line has no newline (it would run into the line after the include)", () => {
    const dir = folderOf({ "s.lua": '--- @include "a"\nreturn a\n', "a.lua": "local a = 1" });
    expect(joinError(join(dir, "s.lua")).message).toMatch(/a\.lua: a part ends with a newline/);
  });
});

describe("findLuaEntry and readLuaChunk", () => {
  const dir = folderOf({
    "first/one.lua": "return 1\n",
    "second/one.lua": "return 2\n",
    "second/two/two.lua": '--- @include "part"\n',
    "second/two/part.lua": "return 22\n",
  });
  const dirs = [pathToFileURL(join(dir, "first/")), pathToFileURL(join(dir, "second/"))];

  it("finds <name>.lua or the entry <name>/<name>.lua, in the first folder that has either", () => {
    expect(findLuaEntry(dirs, "one")).toBe(join(dir, "first/one.lua"));
    expect(findLuaEntry(dirs, "two")).toBe(join(dir, "second/two/two.lua"));
    expect(findLuaEntry(dirs, "three")).toBeUndefined();
  });

  it("reads a script's joined chunk, and says where it looked when no folder has it", () => {
    expect(readLuaChunk(dirs, "two")).toBe("return 22\n");
    expect(() => readLuaChunk(dirs, "three")).toThrow(
      `lua/three.lua: not found as three.lua or three/three.lua in ${join(dir, "first/")}, ${join(dir, "second/")}`,
    );
  });
});
