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
  /**
   * A restore after the store lost its state: when the slot group holds no configuration at all, the
   * sync script grants nothing new for this long (ms, `lossQuietMs`). 0 (default): a plain write.
   */
  restoreQuietMs?: number;
}

/**
 * How long a rule restored after a loss grants nothing new: every token granted before the loss has then
 * aged out of every window. A token is spent before its lease (or allowance) ends and counts over its
 * window from then, rounded up to its bucket (50 ms up to 5 s, W/100 beyond; strict's spent tokens W/100,
 * plus 10 ms), and approximate usage reported late counts from up to 100 ms before its report.
 */
export function lossQuietMs(rule: QuotaRule): number {
  const longest = Math.max(...rule.limits.map((limit) => limit.windowMs));
  return longest + rule.leaseMs + Math.max(50, Math.ceil(longest / 100)) + 100;
}

export function ruleWriteCall(write: RuleWrite): { keys: [string]; args: Array<string | number> } {
  const { config } = slotGroupKeys(write.namespace, write.name, write.group);
  const rule = write.rule === null ? "" : encodeRule(write.rule);
  const args = [write.stamp, write.rule === null ? "" : write.version, rule, RULE_TOMBSTONE_MS];
  return { keys: [config], args: write.restoreQuietMs ? [...args, write.restoreQuietMs] : args };
}

/** Whether the script wrote (false: the slot group already holds a configuration from a newer policy). */
export function ruleWritten(reply: unknown): boolean {
  return reply === 1 || reply === 2;
}

/** Whether the script wrote where the slot group held no configuration at all (none, or one lost). */
export function ruleCreated(reply: unknown): boolean {
  return reply === 2;
}
