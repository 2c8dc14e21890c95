// What the Quotas core needs from the counter store: run one sync call (lua/quota-sync.lua) and keep
// each rule's configuration where that script reads it.
import type { QuotaRule, SyncReply, SyncRequest } from "../../../sdk/src/wire.ts";

export interface QuotaStore {
  /** One sync call for one slot group; `now` is this process's clock (ms). */
  sync(request: SyncRequest, now: number): Promise<SyncReply>;
  /** Writes (or, with `rule: null`, removes) a rule's configuration in every one of its slot groups. */
  publish(name: string, rule: QuotaRule | null, version: string, slotGroups: number): Promise<void>;
}
