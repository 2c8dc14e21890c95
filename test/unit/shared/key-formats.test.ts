// Keys are a stored format: the state the running release wrote is found only under the same names. Every
// key builder of sdk/src/protocol/keys.ts (the one module that builds keys) against the names written out.
import { describe, expect, it } from "vitest";
import {
  capBlobKey,
  capIdentityKey,
  capKeyPrefix,
  capPageKey,
  capPageName,
  capRecordKey,
  capTagOf,
  encodeSync,
  limitKey,
  perUserLogKey,
  quotaKey,
  quotaRuleIndexKey,
  scopedLimitKey,
  slotGroupKeys,
  slotGroupOf,
  slotGroupPrefix,
} from "../../../sdk/src/protocol/index.ts";

describe("key formats", () => {
  it("names capping keys <ns>:cap:{<tag>}:ids, u:<range>, r:<range> and p:<page>", () => {
    expect(capIdentityKey("tg", 208)).toBe("tg:cap:{208}:ids");
    expect(capBlobKey("prod:eu-1", 0, 3)).toBe("prod:eu-1:cap:{0}:u:3");
    expect(capRecordKey("tg", 255, 7)).toBe("tg:cap:{255}:r:7");
    expect(capPageKey("tg", 3906)).toBe("tg:cap:{208}:p:3906");
    expect(capKeyPrefix("tg", 17)).toBe("tg:cap:{17}:");
    expect(capPageName(12)).toBe("p:12");
    expect([0, 1023, 1024, 2 ** 31 - 1].map(capTagOf)).toEqual([0, 0, 1, 255]);
  });

  it("names rate-limit keys <ns>:rl:{<key>}:<algorithm> and <ns>:rls:{<scope>}:<algorithm>:<key>, braces, % and lone surrogates encoded", () => {
    expect(limitKey("tg", "gcra", "user:42")).toBe("tg:rl:{user:42}:gcra");
    expect(limitKey("tg", "sliding", "a{b}%c")).toBe("tg:rl:{a%7Bb%7D%25c}:sliding");
    expect(limitKey("tg", "gcra", "x\ud800y")).toBe("tg:rl:{x%uD800y}:gcra");
    expect(scopedLimitKey("tg", "team{1}", "fixed", "k%}")).toBe("tg:rls:{team%7B1%7D}:fixed:k%25%7D");
    expect(scopedLimitKey("ns", "s", "gcra", "\udc00")).toBe("ns:rls:{s}:gcra:%uDC00");
    expect(perUserLogKey("tg", 42)).toBe("tg:log:{42}");
    expect(perUserLogKey("tg", 42, "t1")).toBe("tg:log:{t1}:42");
  });

  it("names quota keys <ns>:q:{<rule>.<group>}:cfg, seq, inst and k:<key>, the group by FNV-1a of the key", () => {
    expect(slotGroupPrefix("tg", "pay", 0)).toBe("tg:q:{pay.0}");
    expect(slotGroupKeys("tg", "api.v2", 5)).toEqual({
      config: "tg:q:{api.v2.5}:cfg",
      sequences: "tg:q:{api.v2.5}:seq",
      instances: "tg:q:{api.v2.5}:inst",
    });
    expect(quotaKey(slotGroupPrefix("tg", "pay", 63), "user:1")).toBe("tg:q:{pay.63}:k:user:1");
    expect(quotaKey("tg:q:{a.0}", "k{x}")).toBe("tg:q:{a.0}:k:k{x}");
    expect(quotaRuleIndexKey("tg")).toBe("tg:q:rules");
    expect(["", "a", "user:1", "\u00e9t\u00e9", "x".repeat(256)].map((key) => slotGroupOf(key, 64))).toEqual([
      5, 44, 11, 59, 5,
    ]);
    expect(["a", "b", "hot"].map((key) => slotGroupOf(key, 7))).toEqual([5, 6, 5]);
    const entry = { usage: [], refunds: [], offered: 0, want: 0 };
    const request = { instanceId: "i1", rule: "pay", group: 3, seq: 9, configVersion: "v" };
    const call = encodeSync(
      "tg",
      {
        ...request,
        entries: [
          { key: "k1", ...entry },
          { key: "k2", ...entry },
        ],
      },
      1000,
    );
    expect(call.keys).toEqual([
      "tg:q:{pay.3}:cfg",
      "tg:q:{pay.3}:seq",
      "tg:q:{pay.3}:inst",
      "tg:q:{pay.3}:k:k1",
      "tg:q:{pay.3}:k:k2",
    ]);
  });
});
