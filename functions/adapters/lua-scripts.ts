// The Lua scripts in lua/, read once per process. The engine's run as Redis Functions (tollgateLibrary, loaded
// once per primary, called by FCALL); the rate-limit scripts are sent by RedisLimitStore itself (EVALSHA by
// the SHA computed here, EVAL on NOSCRIPT).
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { ALGORITHMS, type Algorithm } from "../core/limits/limit-specs.ts";
import { defineLibrary } from "./redis-functions.ts";

/**
 * In the repository the scripts are at ../../lua/ from this file; in a Lambda bundle (one file), the
 * bundling step copies them to ./lua/ beside it.
 */
const LUA_DIRS = [new URL("./lua/", import.meta.url), new URL("../../lua/", import.meta.url)];

export function load(name: string): string {
  for (const dir of LUA_DIRS) {
    const file = new URL(`${name}.lua`, dir);
    if (existsSync(file)) return readFileSync(file, "utf8");
  }
  throw new Error(`lua/${name}.lua not found beside the code (${LUA_DIRS.map(String).join(", ")})`);
}

/** A script's text and the SHA1 that EVALSHA names it by. */
export interface LuaScript {
  readonly lua: string;
  readonly sha: string;
}

const script = (lua: string): LuaScript => ({ lua, sha: createHash("sha1").update(lua).digest("hex") });

/** The rate-limit scripts: limit-common.lua, then the algorithms they run, then their driver. */
const common = load("limit-common");

/**
 * A chunk that returns its call's function as an EVAL script: every call runs the chunk, then the function
 * with KEYS and ARGV.
 */
const asEval = (chunk: string): string => `return (function()\n${chunk}\nend)()(KEYS, ARGV)`;

/** The chunk of POST /v1/limit per algorithm: only that algorithm is defined in it. */
export const limitChunks = Object.fromEntries(
  ALGORITHMS.map((algorithm) => [algorithm, [common, load(algorithm), load("limit")].join("\n")]),
) as Record<Algorithm, string>;

/** The chunk of POST /v1/limits: every algorithm, any number of keys (1 .. MAX_LIMITS) of one hash tag. */
export const limitsChunk = [common, ...ALGORITHMS.map(load), load("limits")].join("\n");

export const limitScripts = Object.fromEntries(
  ALGORITHMS.map((algorithm) => [algorithm, script(asEval(limitChunks[algorithm]))]),
) as Record<Algorithm, LuaScript>;

export const limitsScript = script(asEval(limitsChunk));

/**
 * The scripts run as Redis Functions, one library (redis-functions.ts): each chunk runs once per primary at
 * load and returns the function FCALL runs. cap-sends is 1,600 lines: as an EVAL script, every call
 * re-created its ~60 functions (docs/DECISIONS.md, "cap-sends as a Redis Function").
 */
export const tollgateLibrary = defineLibrary({ capSends: load("cap-sends") });
