// A rule as the engine holds it: its definition (from the options or a sync reply), its slot groups and
// keys. Mutable in place, so an operator's change reaches every resolved handle without re-resolving.
import type { QuotaHandle } from "./handle.ts";
import { type QuotaRule, type SyncRequest, slotGroupOf } from "./wire.ts";

/** One slot group of a rule: one sync call covers all its keys. */
export interface GroupState {
  readonly rule: RuleState;
  readonly index: number;
  readonly handles: Set<QuotaHandle>;
  /** The last sequence number used (per instance and group, from 1). */
  seq: number;
  /** Instances that synced this group lately, as the store last said (0: never heard). */
  instances: number;
  /** Local ms of the last successful sync (-1: never). */
  lastOkAt: number;
  /** Local ms since when the store has been unreachable for this group (-1: reachable). */
  unreachableSince: number;
  /** A request sent and not acknowledged: resent as is (same seq, same entries) until it is. */
  pending: { request: SyncRequest; handles: QuotaHandle[] } | undefined;
  /** A sync of this group is on the wire. */
  busy: boolean;
  /** Local ms when the last new request was taken (-1: never); its difference is the request's `elapsedMs`. */
  lastSentAt: number;
}

/** `RateLimit-Policy` of a rule, e.g. `1000;w=1, 4000;w=5` (windows in seconds). */
export function policyHeader(rule: QuotaRule): string {
  return rule.limits.map((l) => `${l.max};w=${Math.ceil(l.windowMs / 1000)}`).join(", ");
}

export class RuleState {
  definition: QuotaRule | undefined;
  /** The version of the definition held ("" before one arrives from the store). */
  configVersion = "";
  /** Each limit's `max`, indexed like the rule's limits. */
  maxes: Float64Array = new Float64Array(0);
  policy = "";
  /** Local ms until which the store said the rule is not configured (no syncs meanwhile). */
  missingUntil = 0;
  readonly handles = new Map<string, QuotaHandle>();
  groups: GroupState[] = [];

  constructor(
    readonly name: string,
    /** Instances assumed before the store reports a count. */
    private readonly instancesHint: number,
  ) {
    this.groups = [this.newGroup(0)];
  }

  get known(): boolean {
    return this.definition !== undefined;
  }

  /** Installs a definition; returns the handles whose slot group changed (their usage moves with them). */
  define(rule: QuotaRule, configVersion: string): void {
    this.definition = rule;
    this.configVersion = configVersion;
    this.maxes = Float64Array.from(rule.limits, (l) => l.max);
    this.policy = policyHeader(rule);
    const count = Math.max(1, rule.slotGroups);
    if (count !== this.groups.length) {
      const old = this.groups;
      this.groups = Array.from({ length: count }, (_, i) => old[i] ?? this.newGroup(i));
      for (const group of old) group.handles.clear();
      for (const handle of this.handles.values()) this.place(handle);
    }
  }

  /** The slot group a key syncs with. */
  groupFor(key: string): GroupState {
    return this.groups[slotGroupOf(key, this.groups.length)] as GroupState;
  }

  place(handle: QuotaHandle): void {
    const group = this.groupFor(handle.key);
    handle.group = group;
    group.handles.add(handle);
  }

  /**
   * The safe share: the tightest of each limit over the group's last known instance count, rounded down;
   * 0 while the count is unknown, so an instance never assumes it is alone and takes the whole limit.
   */
  share(group: GroupState): number {
    if (group.instances <= 0 || this.maxes.length === 0) return 0;
    let share = Number.POSITIVE_INFINITY;
    for (let i = 0; i < this.maxes.length; i++)
      share = Math.min(share, Math.floor((this.maxes[i] as number) / group.instances));
    return share;
  }

  private newGroup(index: number): GroupState {
    return {
      rule: this,
      index,
      handles: new Set(),
      seq: 0,
      instances: this.instancesHint,
      lastOkAt: -1,
      unreachableSince: -1,
      pending: undefined,
      busy: false,
      lastSentAt: -1,
    };
  }
}
