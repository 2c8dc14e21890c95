import calculateSlot from "cluster-key-slot";
import { describe, expect, it } from "vitest";
import {
  capBlockKey,
  capKeyOfUser,
  checkNamespace,
  groupOf,
  offsetInBlockOf,
  USERS_PER_BLOCK,
  USERS_PER_GROUP,
} from "../../functions/core/keys.ts";

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
    expect(offsetInBlockOf(id)).toBe(127);
    expect(capKeyOfUser("tg", id)).toBe("tg:cap:{4194303}:7");
  });

  it("refuses a namespace that would change the hash tag", () => {
    expect(() => checkNamespace("a{b}")).toThrow("namespace: expected");
    expect(checkNamespace("prod:eu-1")).toBe("prod:eu-1");
  });
});
