// The Lua scripts in lua/, read once per process. ioredis sends each by SHA and falls back to EVAL on
// NOSCRIPT (after SCRIPT FLUSH, a restart or a failover), per connection.
import { readFileSync } from "node:fs";

function load(name: string): string {
  return readFileSync(new URL(`../../lua/${name}.lua`, import.meta.url), "utf8");
}

import { BLOCKS_PER_GROUP } from "../core/keys.ts";

/**
 * Each script takes a fixed number of keys: ioredis routes an autopipelined custom command by its first
 * key only when it knows where the keys are.
 */
export const luaScripts = {
  capSends: { lua: load("cap-sends"), numberOfKeys: BLOCKS_PER_GROUP },
} as const;
