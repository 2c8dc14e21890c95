// The slot batcher's contract (functions/adapters/slot-batcher.ts), with calls the test answers by hand: a
// slot's first item is sent once the event loop's turn has run its ready callbacks, with the items for its
// slot made meanwhile; items arriving while their slot's call is in flight go together as the next call, in
// arrival order, at most maxPerCall a call; other slots are not held; a joined call's failure is each of
// its items'.
import { describe, expect, it } from "vitest";
import { type Settled, SlotBatcher } from "../../../functions/adapters/slot-batcher.ts";

/** A call the test settles by hand, with what it was sent. */
interface Pending<T> {
  sent: T;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

function recording() {
  const ones: Pending<string>[] = [];
  const manies: Pending<readonly string[]>[] = [];
  const batcher = new SlotBatcher<string, string>({
    one: (item) => new Promise((resolve, reject) => ones.push({ sent: item, resolve: resolve as never, reject })),
    many: (items) =>
      new Promise((resolve, reject) => manies.push({ sent: [...items], resolve: resolve as never, reject })),
    maxPerCall: 3,
  });
  return { batcher, ones, manies };
}

const answered = (items: readonly string[]): Settled<string>[] =>
  items.map((item) => ({ ok: true, value: `done ${item}` }));
const tick = () => new Promise((resolve) => setImmediate(resolve));

describe("SlotBatcher", () => {
  it("sends a lone item alone once the event loop's turn has run its ready callbacks, with no timer", async () => {
    const { batcher, ones, manies } = recording();
    const reply = batcher.run(7, "a");
    // not in the same tick: a request read in the same poll may still make a call for the slot
    expect(ones).toEqual([]);
    await tick();
    expect(ones.map((p) => p.sent)).toEqual(["a"]);
    ones[0]?.resolve("done a");
    await expect(reply).resolves.toBe("done a");
    await tick();
    expect(batcher.inFlight).toBe(0);
    expect(manies).toEqual([]);
  });

  it("joins the items made in the same turn as their slot's first into its call, at most maxPerCall a call", async () => {
    const { batcher, ones, manies } = recording();
    const replies = ["a", "b", "c", "d", "e"].map((item) => batcher.run(7, item));
    // another slot is not held by slot 7's call
    const other = batcher.run(8, "x");
    await tick();
    expect(manies.map((p) => p.sent)).toEqual([["a", "b", "c"]]);
    expect(ones.map((p) => p.sent)).toEqual(["x"]);
    manies[0]?.resolve(answered(["a", "b", "c"]));
    await tick();
    // the ones left over went on waiting for that call, and go together as the next
    expect(manies.map((p) => p.sent)).toEqual([
      ["a", "b", "c"],
      ["d", "e"],
    ]);
    manies[1]?.resolve(answered(["d", "e"]));
    ones[0]?.resolve("done x");
    expect(await Promise.all(replies)).toEqual(["done a", "done b", "done c", "done d", "done e"]);
    expect(await other).toBe("done x");
  });

  it("joins the items that arrive while their slot's call is in flight, in order, and sends one left over alone", async () => {
    const { batcher, ones, manies } = recording();
    const first = batcher.run(7, "a");
    await tick();
    expect(ones.map((p) => p.sent)).toEqual(["a"]);
    const replies = ["b", "c", "d", "e"].map((item) => batcher.run(7, item));
    ones[0]?.resolve("done a");
    await tick();
    expect(manies.map((p) => p.sent)).toEqual([["b", "c", "d"]]);
    manies[0]?.resolve(answered(["b", "c", "d"]));
    await tick();
    // the one left over goes as it would alone
    expect(ones.map((p) => p.sent)).toEqual(["a", "e"]);
    ones[1]?.resolve("done e");
    expect(await first).toBe("done a");
    expect(await Promise.all(replies)).toEqual(["done b", "done c", "done d", "done e"]);
  });

  it("rejects each item of a joined call that failed with the call's error, and each failed item alone with its own", async () => {
    const { batcher, ones, manies } = recording();
    const first = batcher.run(1, "a");
    await tick();
    const joined = ["b", "c"].map((item) => batcher.run(1, item));
    ones[0]?.reject(new Error("no answer"));
    await expect(first).rejects.toThrow("no answer");
    await tick();
    const failure = new Error("the joined call failed");
    manies[0]?.reject(failure);
    for (const reply of joined) await expect(reply).rejects.toBe(failure);
    // the slot is free again: the next item goes alone, at the end of its turn
    await tick();
    const again = batcher.run(1, "d");
    await tick();
    const more = ["e", "f"].map((item) => batcher.run(1, item));
    ones[1]?.resolve("done d");
    await tick();
    const own = new Error("WRONGTYPE of f alone");
    manies[1]?.resolve([
      { ok: true, value: "done e" },
      { ok: false, error: own },
    ]);
    await expect(again).resolves.toBe("done d");
    await expect(more[0]).resolves.toBe("done e");
    await expect(more[1]).rejects.toBe(own);
  });

  it("fails every item of a joined call that answers a different number of items", async () => {
    const { batcher, ones, manies } = recording();
    batcher.run(2, "a");
    await tick();
    const joined = ["b", "c"].map((item) => batcher.run(2, item));
    ones[0]?.resolve("done a");
    await tick();
    manies[0]?.resolve(answered(["b"]));
    for (const reply of joined) await expect(reply).rejects.toThrow("answered 1 items, not 2");
  });

  it("refuses a maxPerCall below 1", () => {
    expect(() => new SlotBatcher({ one: async () => 0, many: async () => [], maxPerCall: 0 })).toThrow("maxPerCall");
  });
});
