import calculateSlot from "cluster-key-slot";
import { describe, expect, it } from "vitest";
import { checkNamespace } from "../../../functions/core/shared/namespace.ts";
import {
  CAP_TAGS,
  capIdentityKey,
  capPageKey,
  capRecordKey,
  capTagOf,
  pageOf,
  readLuaChunk,
  recordRangeOf,
  USERS_PER_GROUP,
  USERS_PER_PAGE,
} from "../../../sdk/src/protocol/index.ts";

describe("keys", () => {
  it("puts a group of consecutive users under one tag, one page block per 256 of them", () => {
    const first = 5 * USERS_PER_GROUP;
    const slots = new Set<number>();
    const pages = new Set<string>();
    for (let id = first; id < first + USERS_PER_GROUP; id++) {
      const tag = capTagOf(id);
      pages.add(capPageKey("tg", pageOf(id)));
      for (const key of [
        capPageKey("tg", pageOf(id)),
        capRecordKey("tg", tag, recordRangeOf(id)),
        capIdentityKey("tg", tag),
      ])
        slots.add(calculateSlot(key));
    }
    expect(slots.size).toBe(1);
    expect(pages.size).toBe(USERS_PER_GROUP / USERS_PER_PAGE);
    // the next group has the next tag; CAP_TAGS groups later the tags come round again
    expect(capTagOf(first + USERS_PER_GROUP)).toBe(6);
    expect(capTagOf(first + CAP_TAGS * USERS_PER_GROUP)).toBe(5);
  });

  it("maps the largest user ID", () => {
    const id = 4_294_967_295;
    expect(pageOf(id)).toBe(16_777_215);
    expect(capTagOf(id)).toBe(CAP_TAGS - 1);
    expect(capPageKey("tg", pageOf(id))).toBe("tg:cap:{255}:p:16777215");
    expect(capRecordKey("tg", capTagOf(id), recordRangeOf(id))).toBe("tg:cap:{255}:r:7");
  });

  it("agrees with the page size lua/cap-sends.lua is written for", () => {
    const lua = readLuaChunk([new URL("../../../lua/", import.meta.url)], "cap-sends");
    expect(lua).toMatch(new RegExp(`PAGE_USERS, MIN_COMPACT_AT, MIN_CLASS_LIMIT = \\d+, ${USERS_PER_PAGE},`));
    // a user's offset travels as one byte, a page number as three
    expect(USERS_PER_PAGE).toBeLessThanOrEqual(256);
    expect(pageOf(4_294_967_295)).toBeLessThan(2 ** 24);
  });

  it("refuses a namespace that would change the hash tag", () => {
    expect(() => checkNamespace("a{b}")).toThrow("namespace: expected");
    expect(checkNamespace("prod:eu-1")).toBe("prod:eu-1");
  });
});
