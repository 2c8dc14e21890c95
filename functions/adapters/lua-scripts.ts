// The Lua scripts in lua/, read once per process. ioredis sends each by SHA and falls back to EVAL on
// NOSCRIPT (after SCRIPT FLUSH, a restart or a failover), per connection.
import { readFileSync } from "node:fs";

function load(name: string): string {
  return readFileSync(new URL(`../../lua/${name}.lua`, import.meta.url), "utf8");
}

import { BLOCKS_PER_GROUP } from "../core/keys.ts";
import { ALGORITHMS, MAX_LIMITS } from "../core/limits.ts";

/** lua/limits.lua with every algorithm file in front of it: one script, one atomic call. */
const limitsLua = ["local ALGORITHMS = {}", ...ALGORITHMS.map(load), load("limits")].join("\n");

/**
 * Each script takes a fixed number of keys: ioredis routes an autopipelined custom command by its first
 * key only when it knows where the keys are.
 */
export const luaScripts: Record<string, { lua: string; numberOfKeys: number }> = {
  capSends: { lua: load("cap-sends"), numberOfKeys: BLOCKS_PER_GROUP },
  capHistory: { lua: load("cap-history"), numberOfKeys: 1 },
  // limits1 .. limits16: the same script once per key count
  ...Object.fromEntries(Array.from({ length: MAX_LIMITS }, (_, i) => [`limits${i + 1}`, { lua: limitsLua, numberOfKeys: i + 1 }])),
};
