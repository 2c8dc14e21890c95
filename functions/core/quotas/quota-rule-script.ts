// The protocol of lua/quota-rule.lua: a quota rule's configuration written to one slot group only when
// it comes from a policy read no earlier than the one already there (compare-and-set on the stamp).
import { encodeRule, type QuotaRule, slotGroupKeys } from "../../../sdk/src/protocol/index.ts";

/** A removed rule's tombstone outlives any container's refresh interval, so none can bring it back. */
export const RULE_TOMBSTONE_MS = 86_400_000;

export interface RuleWrite {
  namespace: string;
  name: string;
  group: number;
  /** null removes the rule. */
  rule: QuotaRule | null;
  version: string;
  /** When the writer read the policy holding this configuration (ms): a newer stored stamp wins. */
  stamp: number;
}

export function ruleWriteCall(write: RuleWrite): { keys: [string]; args: Array<string | number> } {
  const { config } = slotGroupKeys(write.namespace, write.name, write.group);
  const rule = write.rule === null ? "" : encodeRule(write.rule);
  return { keys: [config], args: [write.stamp, write.rule === null ? "" : write.version, rule, RULE_TOMBSTONE_MS] };
}

/** Whether the script wrote (false: the slot group already holds a configuration from a newer policy). */
export function ruleWritten(reply: unknown): boolean {
  return reply === 1;
}
