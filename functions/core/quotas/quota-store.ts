// What the Quotas core needs from the counter store: run one sync call (lua/quota-sync/) and keep
// each rule's configuration where that script reads it (lua/quota-rule.lua).
import type { QuotaRule, SyncReply, SyncRequest } from "../../../sdk/src/protocol/index.ts";

export interface QuotaStore {
  /** One sync call for one slot group; `now` is this process's clock (ms). */
  sync(request: SyncRequest, now: number): Promise<SyncReply>;
  /**
   * Writes (or, with `rule: null`, removes) a rule's configuration in every one of its slot groups, in
   * each unless it holds one with a newer `stamp` (when its writer read the policy, ms), and keeps the index
   * of rule names in step. Resolves true when every group took the write (none held a newer one).
   */
  publish(name: string, rule: QuotaRule | null, version: string, slotGroups: number, stamp: number): Promise<boolean>;
  /** The names of the rules in the store's index: written by any process and not removed since. */
  publishedNames(): Promise<string[]>;
  /**
   * `publish` of a rule that may have been lost with the store's state (FLUSHALL, a node back empty): each
   * slot group that holds no configuration at all gets it with a new epoch, and grants nothing new for
   * `quietMs` (lossQuietMs). Resolves with the slot groups that held none.
   */
  restore(
    name: string,
    rule: QuotaRule,
    version: string,
    slotGroups: number,
    stamp: number,
    quietMs: number,
  ): Promise<number[]>;
}
