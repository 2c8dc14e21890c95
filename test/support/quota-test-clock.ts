// The test build of quota-sync: lua/quota-sync/ joined with test/support/lua/store-now.lua for its store-clock
// part, so a test sets the store's time (the slot group's test clock key) instead of waiting for it. The
// production library (functions/adapters/lua-scripts.ts, the SDK's transport) never reads that key: the
// tooling test holds both to it.
import type { TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import { RedisQuotaStore } from "../../functions/adapters/redis-quota-store.ts";
import {
  joinLua,
  quotaLibraryOf,
  type SyncReply,
  type SyncRequest,
  slotGroupTestClockKey,
} from "../../sdk/src/protocol/index.ts";

/** The parts swapped in the test build: the store's clock. */
export const TEST_CLOCK_PARTS = { "store-now": new URL("./lua/store-now.lua", import.meta.url) } as const;

/** The joined chunk of quota-sync's test build. */
export const testClockQuotaChunk = (): string =>
  joinLua(new URL("../../lua/quota-sync/quota-sync.lua", import.meta.url), { parts: TEST_CLOCK_PARTS }).text;

/** The test build as a Redis Function library (its own name: its code differs from the service's). */
export const testClockQuotaLibrary = quotaLibraryOf(testClockQuotaChunk());

/** How long a test clock key lives (every test key expires: elapseOnServer). It is set again before each call. */
const TEST_CLOCK_TTL_MS = 600_000;

/** Sets the store's clock of one slot group to `at` (ms). */
export async function setStoreClock(
  cluster: TollgateCluster,
  namespace: string,
  rule: string,
  group: number,
  at: number,
): Promise<void> {
  await cluster.set(slotGroupTestClockKey(namespace, rule, group), String(at), "PX", TEST_CLOCK_TTL_MS);
}

/**
 * A RedisQuotaStore running the test build, whose store clock is the test's: before each call the slot
 * group's clock is set to `storeNow` when a test holds it there, else to the call's `now` (one clock for
 * the caller and the store, which the test moves).
 */
export class TestClockQuotaStore extends RedisQuotaStore {
  /** The store's time for the next calls; undefined: each call's `now`. */
  storeNow: number | undefined;

  constructor(
    private readonly testCluster: TollgateCluster,
    private readonly storeNamespace: string,
  ) {
    super(testCluster, storeNamespace, 2_000, testClockQuotaLibrary);
  }

  override async sync(request: SyncRequest, now: number): Promise<SyncReply> {
    await this.clockFor(request, now);
    return super.sync(request, now);
  }

  override async read(request: SyncRequest, now: number): Promise<SyncReply> {
    await this.clockFor(request, now);
    return super.read(request, now);
  }

  private clockFor(request: SyncRequest, now: number): Promise<void> {
    return setStoreClock(this.testCluster, this.storeNamespace, request.rule, request.group, this.storeNow ?? now);
  }
}
