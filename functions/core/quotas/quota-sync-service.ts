// The server side of one Quotas sync over HTTP (POST /v1/quotas/sync): the request checked against the
// protocol's strict schema (syncRequestSchema), the checks against the policy's rule (slot group, keys),
// and the rule configuration kept in Redis in step with the policy, then the same script the in-VPC
// clients call.
import {
  MAX_SLOT_GROUPS,
  type SyncReply,
  type SyncRequest,
  slotGroupOf,
  syncRequestSchema,
} from "../../../sdk/src/protocol/index.ts";
import type { Clock } from "../shared/clock.ts";
import { ValidationError } from "../shared/errors.ts";
import type { PublishedQuotaRule } from "../shared/quota-rules.ts";
import { parseOrThrow } from "../shared/validation.ts";
import { lossQuietMs } from "./quota-rule-script.ts";
import type { QuotaStore } from "./quota-store.ts";

/** The policy's quota rules in service, and how new that policy is (`rulesStamp`). */
export interface QuotaRulesInService {
  quotas: ReadonlyMap<string, PublishedQuotaRule>;
  stamp: number;
}

/**
 * How new the rules of a policy object are, for the compare-and-set of rule writes: ordered first by when
 * the store wrote the object (`modifiedAt`: one clock, S3's, whole seconds), so a container whose clock runs
 * ahead can never make an older policy look newer; then, between two uploads in the same second, by when
 * the container started its read (`loadedAt`, its own clock, at most 999 ms after the second).
 */
export function rulesStamp(modifiedAt: number, loadedAt: number): number {
  const second = Math.floor(modifiedAt / 1000) * 1000;
  return second + Math.min(Math.max(loadedAt - second, 0), 999);
}

export interface QuotaSyncServiceOptions {
  store: QuotaStore;
  /**
   * The quota rules now in service. `rule` is the one a sync names: a source that does not have it may
   * look again first (a container still on the previous policy would otherwise answer `norule`).
   */
  rules: (rule?: string) => Promise<QuotaRulesInService>;
  clock: Clock;
  /** The store had lost a rule's configuration (its state with it), now restored: log it, count it. */
  onStateLost?: (loss: QuotaStateLoss) => void;
}

/** The metric (namespace Tollgate) counting slot groups found without their rule's configuration. */
export const QUOTA_STATE_LOST_METRIC = "QuotaStateLost";

/** A rule whose configuration was gone from some slot groups, written again from the policy. */
export interface QuotaStateLoss {
  rule: string;
  /** The slot groups that held no configuration. */
  groups: number[];
  /** How long those groups grant nothing new (ms). */
  quietMs: number;
  /** Who saw it: a sync through the route, or the scheduled check. */
  seenBy: "sync" | "schedule";
}

export class QuotaSyncService {
  /** What this process last wrote to Redis, by rule name: a rule is written again only when it changes. */
  private readonly published = new Map<string, PublishedQuotaRule>();
  /** The stamp of the policy whose removals this process last took from the store's index (-1: none yet). */
  private indexedStamp = -1;

  constructor(private readonly options: QuotaSyncServiceOptions) {}

  async sync(body: unknown): Promise<SyncReply> {
    const request: SyncRequest = parseOrThrow(syncRequestSchema, body);
    const inService = await this.options.rules(request.rule);
    await this.publish(inService);
    const now = this.options.clock.now();
    const published = inService.quotas.get(request.rule);
    if (!published) return { status: "norule", serverTime: now, configVersion: "", instances: 0, entries: [] };
    const { slotGroups } = published.rule;
    const grouped = (entry: { key: string }) => slotGroupOf(entry.key, slotGroups) === request.group;
    if (
      request.configVersion !== published.version &&
      !(request.group < slotGroups && request.entries.every(grouped))
    ) {
      // The instance grouped its keys by a definition it held before the operator changed slotGroups. Nothing
      // is counted; the reply brings the definition, and the SDK sends the same usage again, regrouped (a
      // refusal would bring none, and the instance would never learn the change).
      return {
        status: "stale",
        serverTime: now,
        configVersion: published.version,
        rule: published.rule,
        instances: 0,
        entries: [],
      };
    }
    if (request.group >= slotGroups) {
      throw new ValidationError("group", `rule "${request.rule}" has ${slotGroups} slot group(s)`);
    }
    request.entries.forEach((entry, i) => {
      if (slotGroupOf(entry.key, slotGroups) !== request.group) {
        throw new ValidationError(`entries[${i}].key`, `belongs to slot group ${slotGroupOf(entry.key, slotGroups)}`);
      }
    });
    const reply = await this.options.store.sync(request, now);
    if (reply.status !== "norule") return reply;
    // The policy has the rule but its slot group does not: this process wrote it before the sync, so the
    // store lost it (FLUSHALL, a node back empty, a failover that lost writes), or a newer policy removed
    // it (its tombstone refuses the write). Restored: nothing new is granted until every token granted
    // before the loss has aged out.
    await this.restoreRule(request.rule, published, inService.stamp, "sync");
    return this.options.store.sync(request, now);
  }

  /**
   * The scheduled check: every rule of the policy written again where a slot group holds no configuration
   * (lost with the store's state), as after a loss. Clients syncing straight to Redis are served again
   * without an operator. Resolves with the losses found.
   */
  async restore({ quotas, stamp }: QuotaRulesInService): Promise<QuotaStateLoss[]> {
    const losses = await Promise.all(
      [...quotas].map(([name, published]) => this.restoreRule(name, published, stamp, "schedule")),
    );
    return losses.filter((loss): loss is QuotaStateLoss => loss !== undefined);
  }

  private async restoreRule(
    name: string,
    published: PublishedQuotaRule,
    stamp: number,
    seenBy: QuotaStateLoss["seenBy"],
  ): Promise<QuotaStateLoss | undefined> {
    const quietMs = lossQuietMs(published.rule);
    const groups = await this.options.store.restore(
      name,
      published.rule,
      published.version,
      MAX_SLOT_GROUPS,
      stamp,
      quietMs,
    );
    this.published.set(name, published);
    if (groups.length === 0) return undefined;
    const loss = { rule: name, groups, quietMs, seenBy };
    this.options.onStateLost?.(loss);
    return loss;
  }

  /**
   * Writes every rule that changed since this process last wrote it, and removes the rules Redis holds that
   * the policy no longer has: those this process wrote, and, once per policy it serves, every name in the
   * store's index (rules another process wrote: a container started after the removal, or the CLI), so a
   * removed rule is gone for the clients syncing directly too. Called before each sync, so an operator's
   * change reaches Redis with the first sync after the policy is reloaded, and every client with its next
   * sync. Each write is a compare-and-set on `stamp`: a container still serving an older policy never
   * overwrites the rule of a newer one, nor removes a rule a newer one added. A rule is written to every
   * possible slot group, not only its own: an instance still on an earlier, larger `slotGroups` syncs its
   * keys in a group the rule no longer has, and must learn there that the rule changed (it would otherwise
   * keep counting in that group under the old limit).
   */
  async publish({ quotas, stamp }: QuotaRulesInService): Promise<void> {
    // the index is read before any write starts: a write that failed while this waited would be a rejection
    // nobody handles yet (it ended the process: a Redis that did not answer during a kill -9 of a primary)
    const removed = new Set([...this.published.keys()].filter((name) => !quotas.has(name)));
    if (this.indexedStamp !== stamp) {
      for (const name of await this.options.store.publishedNames()) if (!quotas.has(name)) removed.add(name);
    }
    const writes: Promise<unknown>[] = [];
    for (const [name, published] of quotas) {
      if (this.published.get(name)?.version === published.version) continue;
      writes.push(
        this.options.store
          .publish(name, published.rule, published.version, MAX_SLOT_GROUPS, stamp)
          .then(() => void this.published.set(name, published)),
      );
    }
    for (const name of removed) {
      writes.push(
        this.options.store.publish(name, null, "", MAX_SLOT_GROUPS, stamp).then(() => void this.published.delete(name)),
      );
    }
    await Promise.all(writes);
    this.indexedStamp = stamp;
  }
}
