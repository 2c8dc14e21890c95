// The Lua scripts in lua/, read once per process. The engine's are defined on the client (ioredis sends
// each by SHA and falls back to EVAL on NOSCRIPT, per connection); the rate-limit scripts are sent by
// RedisLimitStore itself (EVALSHA by the SHA computed here, EVAL on NOSCRIPT).
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { ALGORITHMS, type Algorithm } from "../core/limits/limit-specs.ts";

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

const capSendsLua = load("cap-sends");

/** A script's text and the SHA1 that EVALSHA names it by. */
export interface LuaScript {
  readonly lua: string;
  readonly sha: string;
}

const script = (lua: string): LuaScript => ({ lua, sha: createHash("sha1").update(lua).digest("hex") });

/** The rate-limit scripts: limit-common.lua, then the algorithms they run, then their driver. */
const common = load("limit-common");

/** The script of POST /v1/limit per algorithm: only that algorithm is defined in it. */
export const limitScripts = Object.fromEntries(
  ALGORITHMS.map((algorithm) => [algorithm, script([common, load(algorithm), load("limit")].join("\n"))]),
) as Record<Algorithm, LuaScript>;

/** The script of POST /v1/limits: every algorithm, any number of keys (1 .. MAX_LIMITS) of one hash tag. */
export const limitsScript = script([common, ...ALGORITHMS.map(load), load("limits")].join("\n"));

/**
 * The scripts defined on the client as commands. Each takes a fixed number of keys: ioredis routes an
 * autopipelined custom command by its first key only when it knows where the keys are. ioredis' `Pipeline`
 * copies every defined script into each autopipelined batch, so only the engine's is here.
 */
export const luaScripts: Record<string, { lua: string; numberOfKeys: number }> = {
  // one declared key, the tag's identity table: the script builds its other keys' names from a prefix
  capSends: { lua: capSendsLua, numberOfKeys: 1 },
};
