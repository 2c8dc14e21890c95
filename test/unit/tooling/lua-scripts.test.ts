// The Lua scripts as Redis runs them, each joined from its entry and parts (sdk/src/protocol/lua-chunks.ts): the same
// bytes as the single files they were (so the libraries keep their names and nothing rolls out), within the
// budgets a chunk and a part keep, and clean under luacheck (Debian's lua-check, configured in .luacheckrc).
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { limitLibrary, load, quotaLibrary, tollgateLibrary } from "../../../functions/adapters/lua-scripts.ts";
import { findLuaEntry, joinLua, type LineOrigin } from "../../../sdk/src/protocol/index.ts";
import { topLevelLocals } from "../../support/lua-locals.ts";
import { TEST_CLOCK_PARTS, testClockQuotaChunk, testClockQuotaLibrary } from "../../support/quota-test-clock.ts";

const root = fileURLToPath(new URL("../../..", import.meta.url));
const LUA = new URL("../../../lua/", import.meta.url);

/**
/**
 * sha256 of each split script's chunk: cap-sends since it may write a block's class numbers at their narrowest width (class-widths.lua), quota-sync since its
 * time is held within a bound of the store's clock (store-now.lua, store-time.lua) and a waiting approximate request is granted from what is left (want).
 * A change to a script changes its chunk and its library's name on purpose: update these with it.
 */
const CHUNK_SHA256 = {
  "cap-sends": "39d18b36d2c6dd259807fa04a1ff58fe14fbd987fed22b5ec5801e5b1bc9953e",
  "quota-sync": "c0ffbc29d3cbe7d68d667f46d0dee1dca170bcd28c17f0a74cc6f8e262d228d6",
};
/** The libraries' names: a hash of their code, so the same name means the same chunks. */
const LIBRARY_NAMES = { tollgate: "tollgate_cb9e3ae9", quota: "tollgate_41c316ca", limit: "tollgate_85c6648e" };

/** No file under lua/ passes this many lines: a part holds one concern. */
const MAX_FILE_LINES = 400;
/** Lua 5.1 allows a function 200 active locals, and a chunk's top level keeps each to its end. */
const MAX_TOP_LEVEL_LOCALS = 150;

interface Chunk {
  /** The entry (or driver) file the chunk is named by, as .luacheckrc names it. */
  file: string;
  text: string;
  /** Where each line is written, for a script joined from parts. */
  origins?: readonly LineOrigin[];
}

const joined = (name: string): Chunk => {
  const entry = findLuaEntry([LUA], name) as string;
  const { text, origins } = joinLua(entry);
  return { file: relative(root, entry), text, origins };
};

/** Every chunk Redis runs: the libraries' (each script is also registered as a no-writes reader), quota-rule's. */
const chunks: Chunk[] = [
  joined("cap-sends"),
  joined("quota-sync"),
  joined("quota-rule"),
  ...Object.entries(limitLibrary.readerChunks).map(([name, text]) => ({
    // a chunk of limit-common.lua, the algorithms it runs, then its driver
    file:
      name === "limits_read" ? "lua/limits.lua" : name === "limit_batch_read" ? "lua/limit-batch.lua" : "lua/limit.lua",
    text: text as string,
  })),
];

/** Where line `line` of `chunk` is written: its part's file and line, or the chunk's own line. */
function whereIs(chunk: Chunk, line: number): string {
  const origin = chunk.origins?.[line - 1];
  return origin ? `${relative(root, origin.file)}:${origin.line}` : `${chunk.file} (joined):${line}`;
}

/** The .lua files under lua/, repository-relative. */
const luaFiles = (readdirSync(LUA, { recursive: true }) as string[])
  .filter((path) => path.endsWith(".lua"))
  .map((path) => `lua/${path}`)
  .sort();

describe("the scripts joined from their parts", () => {
  it("are the chunks pinned for cap-sends and quota-sync, byte for byte", () => {
    const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");
    expect(sha256(load("cap-sends"))).toBe(CHUNK_SHA256["cap-sends"]);
    expect(sha256(load("quota-sync"))).toBe(CHUNK_SHA256["quota-sync"]);
  });

  it("keep the libraries' names, so a deployment loads no new library", () => {
    const names = { tollgate: tollgateLibrary.name, quota: quotaLibrary.name, limit: limitLibrary.name };
    expect(names).toEqual(LIBRARY_NAMES);
  });

  it("are what the libraries run: every chunk of theirs is one checked here", () => {
    const checked = new Set(chunks.map((chunk) => chunk.text));
    for (const library of [tollgateLibrary, quotaLibrary, limitLibrary]) {
      for (const chunk of Object.values(library.readerChunks)) expect(checked.has(chunk as string)).toBe(true);
    }
  });

  it("leave no part out: every file in a script's folder is joined into its chunk", () => {
    const joinedFiles = new Set(chunks.flatMap((chunk) => (chunk.origins ?? []).map(({ file }) => file)));
    const inFolders = luaFiles.filter((file) => file.split("/").length > 2).map((file) => join(root, file));
    expect(inFolders.filter((file) => !joinedFiles.has(file))).toEqual([]);
    expect(inFolders.length).toBeGreaterThan(20);
  });
});

describe("the store's clock of quota-sync (store-now.lua)", () => {
  const production = readFileSync(new URL("quota-sync/store-now.lua", LUA), "utf8");
  const testPart = readFileSync(TEST_CLOCK_PARTS["store-now"], "utf8");
  const timeCalls = (text: string) => text.match(/\brcall\(\s*['"]TIME['"]/g)?.length ?? 0;

  it("is the one part of the script that reads TIME, once", () => {
    const parts = readdirSync(new URL("quota-sync/", LUA)).filter((file) => file.endsWith(".lua"));
    const reading = parts.filter((file) => timeCalls(readFileSync(new URL(`quota-sync/${file}`, LUA), "utf8")) > 0);
    expect(reading).toEqual(["store-now.lua"]);
    expect(timeCalls(production)).toBe(1);
    expect(timeCalls(load("quota-sync"))).toBe(1);
  });

  it("reads no test clock in what ships: the service's library and the SDK's chunk join the production part", () => {
    // the SDK's transport and its prepack join the entry as load() does, with no parts swapped
    const shipped = [load("quota-sync"), joinLua(new URL("quota-sync/quota-sync.lua", LUA)).text, quotaLibrary.code];
    for (const text of shipped) {
      expect(text).toContain(production);
      expect(text).not.toContain(testPart);
      expect(text).not.toMatch(/'clock'/);
      expect(text).not.toMatch(/rcall\('GET'/);
    }
  });

  it("has a test build that differs from the shipped chunk in that part alone, under a library name of its own", () => {
    const testChunk = testClockQuotaChunk();
    expect(testChunk).toContain(testPart);
    expect(testChunk.replace(testPart, production)).toBe(load("quota-sync"));
    expect(testClockQuotaLibrary.name).not.toBe(quotaLibrary.name);
  });
});

describe("the budgets a script keeps", () => {
  it(`has no file under lua/ over ${MAX_FILE_LINES} lines`, () => {
    const lines = (file: string) => readFileSync(join(root, file), "utf8").split("\n").length - 1;
    const over = luaFiles.filter((file) => lines(file) > MAX_FILE_LINES).map((file) => `${file}: ${lines(file)}`);
    expect(over).toEqual([]);
    expect(luaFiles).toContain("lua/cap-sends/block-page.lua");
  });

  it(`has no chunk with more than ${MAX_TOP_LEVEL_LOCALS} top-level locals`, () => {
    const over = chunks
      .map((chunk) => ({ file: chunk.file, locals: topLevelLocals(chunk.text).length }))
      .filter(({ locals }) => locals > MAX_TOP_LEVEL_LOCALS);
    expect(over).toEqual([]);
    expect(chunks.map((chunk) => chunk.file)).toContain("lua/cap-sends/cap-sends.lua");
  });

  it("counts the locals a chunk's top level keeps, not a block's, a string's or a comment's", () => {
    const chunk = [
      "local a, b = 1, ','",
      "local function f(x) local inner = x return inner end",
      "local t = { function() local alsoInner end }",
      "do local scoped end",
      "for i = 1, 2 do local loop = i end",
      "if a then local branch elseif b then local other else local last end",
      "while false do local w end",
      "repeat local r until true",
      "local s = 'local quoted' -- local commented",
      "--[==[ local long ]] ]==] local after = [[ local long string ]]",
      "return f",
    ].join("\n");
    expect(topLevelLocals(chunk)).toEqual(["a", "b", "f", "t", "s", "after"]);
    const many = Array.from({ length: MAX_TOP_LEVEL_LOCALS + 1 }, (_, i) => `local v${i} = ${i}`).join("\n");
    expect(topLevelLocals(many).length).toBeGreaterThan(MAX_TOP_LEVEL_LOCALS);
  });
});

describe("luacheck", () => {
  /** luacheck's findings for `chunk`, each at the part's file and line; a luacheck that cannot run fails. */
  function findings(chunk: Chunk): string[] {
    const args = ["--config", join(root, ".luacheckrc"), "--formatter", "plain", "--codes", "--no-color"];
    const run = spawnSync("luacheck", [...args, "--filename", chunk.file, "-"], {
      cwd: root,
      input: chunk.text,
      encoding: "utf8",
    });
    if (run.error) {
      const hint = "luacheck did not run (node scripts/ensure-deps.mjs installs Debian's lua-check)";
      throw new Error(hint, { cause: run.error });
    }
    // 0: nothing found, 1: warnings; anything else is luacheck failing
    if (run.status !== 0 && run.status !== 1) throw new Error(`luacheck: ${run.status} ${run.stderr}${run.stdout}`);
    return run.stdout
      .split("\n")
      .filter((line) => line !== "")
      .map((line) => {
        const found = /^[^:]+:(\d+):(\d+): (.*)$/.exec(line);
        return found ? `${whereIs(chunk, Number(found[1]))}:${found[2]}: ${found[3]}` : line;
      });
  }

  it("finds nothing in any chunk Redis runs", () => {
    expect(chunks.flatMap(findings)).toEqual([]);
  });

  it("flags an unused local and an undefined global, at the part's line", () => {
    const chunk = { file: "lua/check.lua", text: "local unused = 1\nreturn missing\n" };
    expect(findings(chunk)).toEqual([
      "lua/check.lua (joined):1:7: (W211) unused variable 'unused'",
      "lua/check.lua (joined):2:8: (W113) accessing undefined variable 'missing'",
    ]);
    // a new shadowing in cap-sends is flagged (its configuration names the ones it holds), at its part
    const cap = joined("cap-sends");
    const lines = cap.text.split("\n");
    const at = lines.indexOf("local function sweepIdentities(newest, sweepAt, floorAt, writes)") + 1;
    const shadowing = [...lines.slice(0, at), "  local call = {}", ...lines.slice(at)].join("\n");
    const callLine = lines.indexOf("local call -- per call") + 1;
    expect(findings({ ...cap, text: shadowing })).toEqual([
      expect.stringMatching(
        new RegExp(
          `^lua/cap-sends/identity-table\\.lua:\\d+:9: \\(W431\\) shadowing upvalue 'call' on line ${callLine}$`,
        ),
      ),
    ]);
  });
});
