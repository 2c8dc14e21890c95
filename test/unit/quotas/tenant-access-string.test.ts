// A tenant's Redis user runs the quota library's functions with its own rights: its access string must
// allow every command the joined quota-sync chunk calls, or a sync fails with NOPERM on ElastiCache.
import { readFileSync } from "node:fs";
import { expect, it } from "vitest";
import { QUOTA_SCRIPT_COMMANDS, tenantAccessString } from "../../../functions/app/tenant-redis-users.ts";
import { findLuaEntry, joinLua } from "../../../sdk/src/protocol/index.ts";

it("allows every command lua/quota-sync/ calls, and no command it does not", () => {
  const entry = findLuaEntry([new URL("../../../lua/", import.meta.url)], "quota-sync");
  if (!entry) throw new Error("quota-sync.lua not found");
  const text = joinLua(entry).text;
  const called = new Set(
    [...text.matchAll(/call\(\s*['"]([A-Za-z]+)['"]/g)].map((m) => (m[1] as string).toLowerCase()),
  );
  expect(called.size).toBeGreaterThan(5);
  for (const command of called) expect(QUOTA_SCRIPT_COMMANDS as readonly string[]).toContain(command);
  const granted = tenantAccessString("tg", "a").split(" ");
  for (const command of called) expect(granted).toContain(`+${command}`);
  // the script's commands and `time` (the store's clock), nothing more
  expect([...called].filter((c) => !QUOTA_SCRIPT_COMMANDS.includes(c as never))).toEqual([]);
  expect(readFileSync(new URL("../../../lua/quota-rule.lua", import.meta.url), "utf8")).toContain("HSET");
});
