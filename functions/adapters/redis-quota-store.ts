// The QuotaStore over the Redis Cluster: lua/quota-sync/ as a Redis Function (FCALL), and the
// per-slot-group copies of each rule's configuration that the script reads in its own slot.
import type { Cluster } from "ioredis";
import {
  decodeSync,
  encodeSync,
  fcall,
  type QuotaRule,
  quotaRuleIndexKey,
  type RedisFunctionLibrary,
  type SyncReply,
  type SyncRequest,
} from "../../sdk/src/protocol/index.ts";
import { ruleCreated, ruleWriteCall, ruleWritten } from "../core/quotas/quota-rule-script.ts";
import type { QuotaStore } from "../core/quotas/quota-store.ts";
import { load as loadLua, quotaLibrary } from "./lua-scripts.ts";
import { redisCallsOf } from "./redis-cluster.ts";

type QuotaRuleCommand = (key: string, ...args: Array<string | number>) => Promise<unknown>;

function quotaRuleCommand(cluster: Cluster): QuotaRuleCommand {
  const commands = cluster as unknown as { quotaRule?: QuotaRuleCommand };
  if (!commands.quotaRule) cluster.defineCommand("quotaRule", { lua: loadLua("quota-rule"), numberOfKeys: 1 });
  return commands.quotaRule!.bind(cluster);
}

export class RedisQuotaStore implements QuotaStore {
  private readonly ruleCommand: QuotaRuleCommand;

  constructor(
    private readonly cluster: Cluster,
    private readonly namespace: string,
    /** How long one sync call may take, retries included. */
    private readonly deadlineMs = 2_000,
    /** The quota-sync library the calls run: the service's (a test build swaps the store's clock part). */
    private readonly library: RedisFunctionLibrary<"quotaSync" | "quotaRead"> = quotaLibrary,
  ) {
    this.ruleCommand = quotaRuleCommand(cluster);
  }

  /**
   * A sync is idempotent by (instance, seq): every failure without an answer is sent again until the
   * deadline, and a call that may have run before its connection failed is answered `duplicate`.
   */
  async sync(request: SyncRequest, now: number): Promise<SyncReply> {
    return this.run(request, now, false);
  }

  /**
   * What the windows of the request's keys hold now, by the same script as a sync: nothing is applied,
   * granted or written, and the reader is not counted as an instance (`instanceId` and `seq` are unused).
   */
  async read(request: SyncRequest, now: number): Promise<SyncReply> {
    return this.run(request, now, true);
  }

  private async run(request: SyncRequest, now: number, read: boolean): Promise<SyncReply> {
    const { keys, args } = encodeSync(this.namespace, request, now, { read });
    const reply = await redisCallsOf(this.cluster).call(
      `quota-sync on ${keys[0]}`,
      keys,
      () => fcall(this.cluster, this.library, read ? "quotaRead" : "quotaSync", keys, args),
      { deadlineMs: this.deadlineMs, retryOn: "no-answer" },
    );
    return decodeSync(reply, request);
  }

  async publish(name: string, rule: QuotaRule | null, version: string, slotGroups: number, stamp: number) {
    const replies = await this.write(name, rule, version, slotGroups, stamp, 0);
    const everywhere = replies.every(ruleWritten);
    // the index follows only a write that was the newest everywhere: an older container's refused write
    // neither adds a name nor takes one away
    if (everywhere) await this.index(rule === null ? "remove" : "add", name, stamp);
    return everywhere;
  }

  async restore(name: string, rule: QuotaRule, version: string, slotGroups: number, stamp: number, quietMs: number) {
    const replies = await this.write(name, rule, version, slotGroups, stamp, quietMs);
    const created = replies.flatMap((reply, group) => (ruleCreated(reply) ? [group] : []));
    // the index went with the state: the restored rule is in it again, so a later removal reaches it
    if (created.length > 0) await this.index("add", name, stamp);
    return created;
  }

  private write(
    name: string,
    rule: QuotaRule | null,
    version: string,
    slotGroups: number,
    stamp: number,
    restoreQuietMs: number,
  ): Promise<unknown[]> {
    return Promise.all(
      Array.from({ length: slotGroups }, (_, group) => {
        const { keys, args } = ruleWriteCall({
          namespace: this.namespace,
          name,
          group,
          rule,
          version,
          stamp,
          restoreQuietMs,
        });
        // through the guarded calls like a sync: after an outage longer than ioredis's reconnect attempts the
        // client has ended, and only that path starts it again (a direct command failed, or queued, for good).
        // The write is a compare-and-set on the policy's stamp, so sending it again never undoes a newer one.
        return redisCallsOf(this.cluster).call(
          `quota-rule on ${keys[0]}`,
          keys,
          () => this.ruleCommand(keys[0] as string, ...args),
          { deadlineMs: this.deadlineMs, retryOn: "no-answer" },
        );
      }),
    );
  }

  async publishedNames(): Promise<string[]> {
    const key = quotaRuleIndexKey(this.namespace);
    return redisCallsOf(this.cluster).call(`quota rule index ${key}`, [key], () => this.cluster.hkeys(key), {
      deadlineMs: this.deadlineMs,
      retryOn: "no-answer",
    });
  }

  private async index(change: "add" | "remove", name: string, stamp: number): Promise<void> {
    const key = quotaRuleIndexKey(this.namespace);
    const calls = redisCallsOf(this.cluster);
    const options = { deadlineMs: this.deadlineMs, retryOn: "no-answer" as const };
    if (change === "add") {
      await calls.call(`quota rule index ${key}`, [key], () => this.cluster.hset(key, name, stamp), options);
      return;
    }
    // a name a newer policy wrote again stays (the check and the delete are two calls: a write between them
    // can still lose its entry, which only leaves that rule to the processes that wrote it to remove)
    const stored = await calls.call(`quota rule index ${key}`, [key], () => this.cluster.hget(key, name), options);
    if (stored !== null && Number(stored) <= stamp)
      await calls.call(`quota rule index ${key}`, [key], () => this.cluster.hdel(key, name), options);
  }
}
