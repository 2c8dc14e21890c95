// Batches decided together share script calls, and each keeps its own decisions and failures (a store
// behind the core's port: which calls are made, and which batches a failed call fails).
import { describe, expect, it } from "vitest";
import type { CapStore } from "../../../functions/core/capping/cap-sends-script.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { capIdentityKey } from "../../../sdk/src/protocol/index.ts";
import { rulesOf, simplePolicy, T0 } from "../../support/rules.ts";

const rules = rulesOf(simplePolicy({ push: [{ window: "1d", max: 1 }] }));
/** A store that allows every user and records each call's key and user count; calls on `failing` reject. */
function fakeStore(failing?: string) {
  const calls: { key: string; users: number }[] = [];
  const store: CapStore = {
    capSends: async (keys, args) => {
      // page arguments (5 bytes, then 2 a user), or ranges' users (byte 2 is 2: 2 bytes, then 5 a user)
      const specs = args.slice(11) as Buffer[];
      const users = specs.reduce(
        (sum, spec) => sum + (spec[1] === 2 ? (spec.length - 2) / 5 : (spec.length - 5) / 2),
        0,
      );
      calls.push({ key: keys[0] as string, users });
      if (keys[0] === failing) throw new Error(`no answer from ${failing}`);
      return Buffer.alloc(users);
    },
  };
  return { store, calls };
}
// user IDs of tag t: (id / 1024) mod 256 = t
const ofTag = (tag: number, n: number) => Array.from({ length: n }, (_, i) => (i * 256 + tag) * 1024 + i);

describe("batches decided together", () => {
  it("share one call per tag, each batch getting its own decisions", async () => {
    const { store, calls } = fakeStore();
    const capper = new Capper({ store, rules: () => rules, clock: fixedClock(T0) });
    const [a, b] = await Promise.all([
      capper.capBatch({ campaignId: "c", channel: "push", userIds: [...ofTag(0, 3), ...ofTag(1, 2)] }),
      capper.capBatch({ campaignId: "c", channel: "push", userIds: ofTag(0, 6).slice(3) }),
    ]);
    expect(calls.map((call) => [call.key, call.users]).sort()).toEqual([
      [capIdentityKey("tg", 0), 6],
      [capIdentityKey("tg", 1), 2],
    ]);
    expect(a?.decisions.map((d) => d.userId)).toEqual([...ofTag(0, 3), ...ofTag(1, 2)]);
    expect(b?.decisions.map((d) => d.decision)).toEqual(["allowed", "allowed", "allowed"]);
  });

  it("are planned apart when they differ in campaign or share a user", async () => {
    const { store, calls } = fakeStore();
    const capper = new Capper({ store, rules: () => rules, clock: fixedClock(T0) });
    await Promise.all([
      capper.capBatch({ campaignId: "c", channel: "push", userIds: ofTag(0, 2) }),
      capper.capBatch({ campaignId: "d", channel: "push", userIds: ofTag(0, 4).slice(2) }),
      capper.capBatch({ campaignId: "c", channel: "push", userIds: ofTag(0, 1) }),
    ]);
    expect(calls.map((call) => call.users).sort()).toEqual([1, 2, 2]);
  });

  it("a failed call fails only the batches with users in it", async () => {
    const { store } = fakeStore(capIdentityKey("tg", 2));
    const capper = new Capper({ store, rules: () => rules, clock: fixedClock(T0) });
    const [a, b] = await Promise.allSettled([
      capper.capBatch({ campaignId: "c", channel: "push", userIds: [...ofTag(0, 2), ...ofTag(2, 1)] }),
      capper.capBatch({ campaignId: "c", channel: "push", userIds: [...ofTag(0, 4).slice(2), ...ofTag(1, 1)] }),
    ]);
    expect(a?.status).toBe("rejected");
    expect(b?.status).toBe("fulfilled");
    if (a?.status === "rejected") expect(String(a.reason)).toContain("no answer from");
  });
});
