// The store epoch's decisions over its ports (no Redis here: the integration test store-loss.test.ts runs the
// scripts): a store is initialised once and only when it never was, slots before the marker; a lost slot
// under pause refuses, under continue is written again and the call sent once more; each loss is told once.
import { describe, expect, it } from "vitest";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { StoreLostError, WriteConflictError } from "../../../functions/core/shared/errors.ts";
import type { ConditionalObjectStore } from "../../../functions/core/shared/object-store.ts";
import {
  initialiseStore,
  type OnStoreLoss,
  StoreEpochGuard,
  type StoreEpochSlots,
  storeEpochObjectKey,
} from "../../../functions/core/shared/store-epoch.ts";
import { HASH_SLOTS, hashSlotOf, storeEpochKey } from "../../../sdk/src/protocol/index.ts";

const T0 = Date.UTC(2026, 11, 2);

/** Objects in memory with compare-and-set, and the order of every write. */
function objects(log: string[]): ConditionalObjectStore & { held: Map<string, string> } {
  const held = new Map<string, string>();
  return {
    held,
    async read(key) {
      const body = held.get(key);
      return body === undefined ? undefined : { body: new TextEncoder().encode(body), etag: body };
    },
    async putIf(key, body, expected) {
      if (held.get(key) !== expected) throw new WriteConflictError(key, "changed");
      held.set(key, body);
      log.push(`put ${key}`);
      return body;
    },
  };
}

/** Epoch keys in memory (slot -> epoch). */
function slots(log: string[]): StoreEpochSlots & { held: Map<number, number> } {
  const held = new Map<number, number>();
  const set = (slot: number, epoch: number) => {
    if (held.has(slot)) return false;
    held.set(slot, epoch);
    return true;
  };
  return {
    held,
    async initialise(_namespace, epoch) {
      log.push("slots");
      return Array.from({ length: HASH_SLOTS }, (_, slot) => slot).filter((slot) => set(slot, epoch));
    },
    async initialiseSlot(_namespace, slot, epoch) {
      log.push(`slot ${slot}`);
      set(slot, epoch);
    },
    async missing(_namespace, probed) {
      return probed.filter((slot) => !held.has(slot));
    },
  };
}

/** A script call on `key`: StoreLostError when its slot's epoch key is gone, else it counts. */
function scriptOn(held: Map<number, number>, counted: string[]) {
  return async (key: string, epochKey: string) => {
    const slot = hashSlotOf(epochKey);
    expect(slot).toBe(hashSlotOf(key));
    if (!held.has(slot)) throw new StoreLostError(epochKey, slot);
    counted.push(key);
    return "counted";
  };
}

function guardOf(onStoreLoss: OnStoreLoss) {
  const log: string[] = [];
  const bucket = objects(log);
  const redis = slots(log);
  const losses: number[] = [];
  const guard = new StoreEpochGuard({
    objects: bucket,
    slots: redis,
    namespace: "tg",
    clock: fixedClock(T0),
    onStoreLoss: async () => onStoreLoss,
    onLoss: (loss) => losses.push(loss.slot),
  });
  return { guard, log, bucket, redis, losses };
}

describe("store epoch", () => {
  it("initialises a store that never was, once, every slot before the marker", async () => {
    const { guard, log, bucket, redis } = guardOf("pause");
    await Promise.all([guard.open(), guard.open(), guard.open()]);
    expect(log).toEqual(["slots", `put ${storeEpochObjectKey("tg")}`]);
    expect(redis.held.size).toBe(HASH_SLOTS);
    expect(JSON.parse(bucket.held.get(storeEpochObjectKey("tg")) as string)).toMatchObject({ epoch: T0 });
  });

  it("never initialises again at a cold start after a loss: the marker says the slots were written", async () => {
    const first = guardOf("pause");
    await first.guard.open();
    first.redis.held.clear();
    const restarted = new StoreEpochGuard({
      objects: first.bucket,
      slots: first.redis,
      namespace: "tg",
      clock: fixedClock(T0 + 1),
      onStoreLoss: async () => "pause",
    });
    const counted: string[] = [];
    await expect(
      restarted.run("tg:rl:{k}:gcra", (e) => scriptOn(first.redis.held, counted)("tg:rl:{k}:gcra", e)),
    ).rejects.toBeInstanceOf(StoreLostError);
    expect(counted).toEqual([]);
    expect(first.redis.held.size).toBe(0);
  });

  it("under pause refuses a lost slot and tells it once, until acknowledged", async () => {
    const { guard, redis, losses, bucket } = guardOf("pause");
    await guard.open();
    const key = "tg:cap:{7}:ids";
    const slot = hashSlotOf(key);
    redis.held.delete(slot);
    const counted: string[] = [];
    const call = () => guard.run(key, (epochKey) => scriptOn(redis.held, counted)(key, epochKey));
    await expect(call()).rejects.toBeInstanceOf(StoreLostError);
    await expect(call()).rejects.toBeInstanceOf(StoreLostError);
    expect(counted).toEqual([]);
    expect(losses).toEqual([slot]);
    expect(guard.status().lostSlots.map((s) => s.slot)).toEqual([slot]);
    // acknowledge: the lost slot written again, the marker kept
    const acknowledged = await initialiseStore(bucket, redis, "tg", fixedClock(T0 + 5));
    expect(acknowledged).toMatchObject({ created: false, slotsWritten: [slot], marker: { epoch: T0 } });
    await expect(call()).resolves.toBe("counted");
    expect(guard.status()).toMatchObject({ lostSlots: [], slotsLostSinceStart: 1, onStoreLoss: "pause" });
  });

  it("under continue writes the slot's key again and counts in the same call", async () => {
    const { guard, redis, losses, log } = guardOf("continue");
    await guard.open();
    const key = "tg:rls:{scope}:gcra:a";
    const slot = hashSlotOf(key);
    redis.held.delete(slot);
    const counted: string[] = [];
    await expect(guard.run(key, (epochKey) => scriptOn(redis.held, counted)(key, epochKey))).resolves.toBe("counted");
    expect(counted).toEqual([key]);
    expect(losses).toEqual([slot]);
    expect(log.at(-1)).toBe(`slot ${slot}`);
    expect(redis.held.get(slot)).toBe(T0);
    expect(guard.status().lostSlots).toEqual([]);
  });

  it("finds a loss in the probed slots for health, and clears it once acknowledged", async () => {
    const { guard, redis, bucket } = guardOf("pause");
    await guard.open();
    for (let slot = 0; slot < 5_461; slot++) redis.held.delete(slot);
    const found = await guard.probe();
    expect(found.length).toBeGreaterThan(0);
    expect(found.every((slot) => slot < 5_461)).toBe(true);
    expect(guard.status().lostSlots.length).toBe(found.length);
    await initialiseStore(bucket, redis, "tg", fixedClock(T0));
    expect(await guard.probe()).toEqual([]);
    expect(guard.status().lostSlots).toEqual([]);
  });

  it("lets two initialisers race: one marker, both return it", async () => {
    const log: string[] = [];
    const bucket = objects(log);
    const redis = slots(log);
    const [a, b] = await Promise.all([
      initialiseStore(bucket, redis, "tg", fixedClock(T0)),
      initialiseStore(bucket, redis, "tg", fixedClock(T0 + 1)),
    ]);
    expect(a.marker).toEqual(b.marker);
    expect([a.created, b.created].sort()).toEqual([false, true]);
    expect(redis.held.size).toBe(HASH_SLOTS);
    expect(storeEpochKey("tg", 0)).toMatch(/^tg:se:\{/);
  });
});
