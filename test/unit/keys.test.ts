import { readFileSync } from "node:fs";
import calculateSlot from "cluster-key-slot";
import { describe, expect, it } from "vitest";
import {
  BLOCKS_PER_GROUP,
  capBlockKey,
  capKeyOfUser,
  checkNamespace,
  groupOf,
  offsetInBlockOf,
  USERS_PER_BLOCK,
  USERS_PER_GROUP,
} from "../../functions/core/shared/keys.ts";

describe("keys", () => {
  it("puts a group of consecutive users in one slot and its blocks in separate keys", () => {
    const first = 5 * USERS_PER_GROUP;
    const slots = new Set<number>();
    const keys = new Set<string>();
    for (let id = first; id < first + USERS_PER_GROUP; id++) {
      slots.add(calculateSlot(capKeyOfUser("tg", id)));
      keys.add(capKeyOfUser("tg", id));
    }
    expect(slots.size).toBe(1);
    expect(keys.size).toBe(USERS_PER_GROUP / USERS_PER_BLOCK);
    expect(capKeyOfUser("tg", first + USERS_PER_GROUP)).toBe(capBlockKey("tg", 6, 0));
  });

  it("maps the largest user ID", () => {
    const id = 4_294_967_295;
    expect(groupOf(id)).toBe(4_194_303);
    expect(offsetInBlockOf(id)).toBe(USERS_PER_BLOCK - 1);
    expect(capKeyOfUser("tg", id)).toBe(`tg:cap:{4194303}:${BLOCKS_PER_GROUP - 1}`);
  });

  it("agrees with the block size and key count lua/cap-sends.lua is written for", () => {
    const lua = readFileSync(new URL("../../lua/cap-sends.lua", import.meta.url), "utf8");
    expect(lua).toContain(`local BLOCK_USERS = ${USERS_PER_BLOCK}\n`);
    expect(lua).toContain(`always all ${BLOCKS_PER_GROUP} (`);
    // a user's offset travels as one byte
    expect(USERS_PER_BLOCK).toBeLessThanOrEqual(256);
  });

  it("refuses a namespace that would change the hash tag", () => {
    expect(() => checkNamespace("a{b}")).toThrow("namespace: expected");
    expect(checkNamespace("prod:eu-1")).toBe("prod:eu-1");
  });
});
