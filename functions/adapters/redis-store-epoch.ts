// The store epoch's keys in Redis (functions/core/shared/store-epoch.ts): one per hash slot, written where
// none is (SET NX), without a lifetime (the cache runs `noeviction`, so nothing removes them but a loss).
import type { Cluster } from "ioredis";
import { HASH_SLOTS, storeEpochKey } from "../../sdk/src/protocol/index.ts";
import type { StoreEpochSlots } from "../core/shared/store-epoch.ts";
import { redisCallsOf } from "./redis-cluster.ts";

/** SET NX commands in flight at once: 16,384 keys take a few round trips per primary. */
const IN_FLIGHT = 1_024;

/**
 * Through the cluster's guarded calls (deadline, retries, circuit): SET NX and EXISTS are safe to send
 * again, so every failure without an answer is retried until the deadline.
 */
export class RedisStoreEpochSlots implements StoreEpochSlots {
  constructor(
    private readonly cluster: Cluster,
    private readonly deadlineMs = 2_000,
  ) {}

  async initialise(namespace: string, epoch: number): Promise<number[]> {
    const written: number[] = [];
    for (let first = 0; first < HASH_SLOTS; first += IN_FLIGHT) {
      const slots = Array.from({ length: Math.min(IN_FLIGHT, HASH_SLOTS - first) }, (_, i) => first + i);
      const replies = await Promise.all(slots.map((slot) => this.setIfMissing(namespace, slot, epoch)));
      replies.forEach((set, i) => {
        if (set) written.push(slots[i] as number);
      });
    }
    return written;
  }

  async initialiseSlot(namespace: string, slot: number, epoch: number): Promise<void> {
    await this.setIfMissing(namespace, slot, epoch);
  }

  async missing(namespace: string, slots: readonly number[]): Promise<number[]> {
    const found = await Promise.all(
      slots.map((slot) => {
        const key = storeEpochKey(namespace, slot);
        return this.guarded(`store epoch of slot ${slot}`, key, () => this.cluster.exists(key));
      }),
    );
    return slots.filter((_, i) => found[i] === 0);
  }

  private async setIfMissing(namespace: string, slot: number, epoch: number): Promise<boolean> {
    const key = storeEpochKey(namespace, slot);
    const reply = await this.guarded(`store epoch of slot ${slot}`, key, () =>
      this.cluster.set(key, String(epoch), "NX"),
    );
    return reply === "OK";
  }

  private guarded<T>(what: string, key: string, send: () => Promise<T>): Promise<T> {
    return redisCallsOf(this.cluster).call(what, [key], send, { deadlineMs: this.deadlineMs, retryOn: "no-answer" });
  }
}
