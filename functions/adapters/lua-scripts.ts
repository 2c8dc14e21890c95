// The Lua scripts in lua/, read once per process. ioredis sends each by SHA and falls back to EVAL on
// NOSCRIPT (after SCRIPT FLUSH, a restart or a failover), per connection.
import { existsSync, readFileSync } from "node:fs";
import { MAX_KEYS_PER_CALL, MIN_KEYS_PER_CALL } from "../core/capping/cap-sends-script.ts";
import { ALGORITHMS, type Algorithm, MAX_LIMITS } from "../core/limits/limit-specs.ts";

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

/** The rate-limit scripts: limit-common.lua, then the algorithms they run, then their driver. */
const common = load("limit-common");
const limitsLua = [common, ...ALGORITHMS.map(load), load("limits")].join("\n");

/** The command that runs one limit of `algorithm` (POST /v1/limit): only that algorithm is defined. */
export const limitCommand = (algorithm: Algorithm) => `limit:${algorithm}` as const;

/**
 * Each script takes a fixed number of keys: ioredis routes an autopipelined custom command by its first
 * key only when it knows where the keys are.
 */
export const luaScripts: Record<string, { lua: string; numberOfKeys: number }> = {
  // capSends3 .. capSends64: cap-sends once per key count (identity table, record hashes, page blocks)
  ...Object.fromEntries(
    Array.from({ length: MAX_KEYS_PER_CALL - MIN_KEYS_PER_CALL + 1 }, (_, i) => [
      `capSends${i + MIN_KEYS_PER_CALL}`,
      { lua: capSendsLua, numberOfKeys: i + MIN_KEYS_PER_CALL },
    ]),
  ),
  ...Object.fromEntries(
    ALGORITHMS.map((algorithm) => [
      limitCommand(algorithm),
      { lua: [common, load(algorithm), load("limit")].join("\n"), numberOfKeys: 1 },
    ]),
  ),
  // limits1 .. limits16: the same script once per key count
  ...Object.fromEntries(
    Array.from({ length: MAX_LIMITS }, (_, i) => [`limits${i + 1}`, { lua: limitsLua, numberOfKeys: i + 1 }]),
  ),
};
