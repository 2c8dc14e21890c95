// The campaign capper: decides a whole batch of sends against the policy's caps, in as few script calls
// as the key layout allows (cap-sends-script.ts plans them and bounds how many run at once).

import { capIdentityKey, capTagOf, DEFAULT_NAMESPACE } from "../../../sdk/src/protocol/index.ts";
import type { Clock } from "../shared/clock.ts";
import { decisionTime, systemClock } from "../shared/clock.ts";
import { PartlyDecidedError, ValidationError } from "../shared/errors.ts";
import { checkNamespace } from "../shared/namespace.ts";
import { parseOrThrow } from "../shared/validation.ts";
import { mergeDecided, mergeParts, partsOf } from "./batch-parts.ts";
import { CalendarProfiles, countedUntil, ProfileLimitError } from "./calendar-profiles.ts";
import { type CampaignBatch, type CampaignBatchInput, campaignBatchSchema } from "./campaign-batch.ts";
import {
  type AnsweredVerdicts,
  CapSendsCoalescer,
  type CapStore,
  type ScriptProfile,
  scriptProfiles,
  type UserWindows,
  Verdicts,
} from "./cap-sends-script.ts";
import { type CappedEligible, cappedEligibleAt } from "./capped-deferral.ts";
import type {
  CapBatchResult,
  CapDecision,
  DecisionKind,
  DeferredSends,
  SegmentTotals,
  ZoneTotals,
} from "./decisions.ts";
import { type FrequencyResult, frequencyReport, frequencyRequestSchema } from "./frequency.ts";
import { type CapRule, DEFAULT_REDELIVERY_MS, keptHorizonMs, type Policy } from "./policy.ts";
import { DEFAULT_PRIORITY } from "./priority.ts";
import { HELD_DEFERRED, HELD_NAMES, NOT_HELD, type QuietHolds, quietHolds } from "./quiet-holds.ts";
import type { Rules } from "./rules-source.ts";

export interface CapperOptions {
  store: CapStore;
  /**
   * The current policy and segments; read once per batch, so a swap never splits a batch. Told the channel,
   * so a source can refresh before judging one it does not know.
   */
  rules: (request: { channel: string }) => Rules | Promise<Rules>;
  clock?: Clock;
  namespace?: string;
  /**
   * How long after a send was counted its message can be redelivered (the queue's visibility timeout ×
   * maxReceiveCount): named sends are kept that long for idempotency even under short caps.
   */
  redeliveryMs?: number;
  /** Write hot users' records in chunks (format 3, docs/decisions/0095; CAP_HOT_RECORDS). Default false. */
  hotRecords?: boolean;
  /**
   * Write page blocks with their users' class numbers at the narrowest width (format 6, docs/decisions/0195;
   * CAP_COMPACT_CLASSES). Default false. Reading every format needs no switch.
   */
  compactClasses?: boolean;
}

/**
 * The sends of a batch as the capper is about to decide them: user IDs ascending, each one's segment
 * number (an index into `segmentNames`, the policy's segments in order, the default last).
 */
export interface PlannedSends {
  userIds: Uint32Array;
  segmentOf: Uint8Array;
  segmentNames: readonly string[];
}

export interface CapBatchOptions {
  /**
   * Called with the validated batch and its sends after the segments are known and before anything is
   * counted; a ValidationError thrown here refuses the batch with nothing counted.
   */
  beforeCount?: (batch: CampaignBatch, sends: PlannedSends) => void;
  /**
   * The clock reading to decide by (default: the capper's clock, read now). Batches decided together with
   * the same reading (and the same `at`, campaign and channel) share their script calls.
   */
  now?: number;
}

/** A batch's decisions, each decided user's windows when asked for (by index in sortedIds), its sorted IDs. */
interface Decided {
  result: CapBatchResult;
  windows: Map<number, UserWindows>;
  sortedIds: Uint32Array;
}

/** Sort key = userId * 2^20 + input position: exact in a double because user IDs have 32 bits. */
const POSITION_SPAN = 2 ** 20;

export class Capper {
  /** Shares script calls between batches decided together (cap-sends-script.ts). */
  private readonly calls: CapSendsCoalescer;
  private readonly store: CapStore;
  private readonly rules: (request: { channel: string }) => Rules | Promise<Rules>;
  private readonly clock: Clock;
  private readonly namespace: string;
  private readonly redeliveryMs: number;
  private readonly hotRecords: boolean;
  private readonly compactClasses: boolean;
  private readonly profileCache = new WeakMap<Policy, Map<string, ScriptProfile[]>>();
  /** The calendar profiles of the latest decision instants (batches decided together share one). */
  private readonly calendarCache = new WeakMap<Policy, Map<string, CalendarProfiles>>();

  constructor(options: CapperOptions) {
    this.calls = new CapSendsCoalescer(options.store);
    this.store = options.store;
    this.rules = options.rules;
    this.clock = options.clock ?? systemClock;
    this.namespace = checkNamespace(options.namespace ?? DEFAULT_NAMESPACE);
    this.redeliveryMs = options.redeliveryMs ?? DEFAULT_REDELIVERY_MS;
    this.hotRecords = options.hotRecords ?? false;
    this.compactClasses = options.compactClasses ?? false;
  }

  /**
   * Decides every send of the batch and counts the allowed ones. When some of its script calls answered and
   * another failed, rejects with PartlyDecidedError<CapBatchResult>: the decisions of the users whose calls
   * answered (the allowed ones are counted), and the failure as its cause.
   */
  capBatch(input: CampaignBatchInput, options: CapBatchOptions = {}): Promise<CapBatchResult> {
    return this.decide(input, "count", options);
  }

  /** The decisions `capBatch` would make now, changing nothing. */
  peek(input: CampaignBatchInput): Promise<CapBatchResult> {
    return this.decide(input, "peek");
  }

  /**
   * The decisions `capBatch` would make now, changing nothing, and for each capped user when the same send
   * is first allowed (the script's retry time; absent: not within the windows the store keeps). Every
   * user's windows are read: dearer than peek(), for the capped users of a what-if.
   */
  async peekEligible(input: CampaignBatchInput): Promise<{ result: CapBatchResult; eligibleAt: Map<number, number> }> {
    const batch = parseOrThrow(campaignBatchSchema, input);
    const rules = await this.rules({ channel: batch.channel });
    const { result, windows, sortedIds } = await this.run(batch, "peek", rules, true);
    const eligibleAt = new Map<number, number>();
    for (const [j, figures] of windows) {
      if (figures.retryAt !== undefined) eligibleAt.set(sortedIds[j] as number, figures.retryAt);
    }
    return { result, eligibleAt };
  }

  /**
   * One user on one channel (POST /v1/frequency): the decision, counted unless `consume` is false, and
   * every applicable window with what is used and left. Without a campaign ID every consuming check counts.
   * The single-user path: one script call that writes only the user's record, never a page block, so its
   * cost is the user's own live sends.
   */
  async checkUser(input: unknown): Promise<FrequencyResult> {
    const request = parseOrThrow(frequencyRequestSchema, input);
    const rules = await this.rules({ channel: request.channel });
    const send = {
      campaignId: request.campaignId ?? "",
      channel: request.channel,
      userIds: [request.userId],
      at: request.at,
      priority: request.priority,
    };
    const now = this.clock.now();
    // one call: the decision and the user's windows as the decision left them (atomic, one round trip)
    let { result, windows } = await this.run(send, request.consume === false ? "peek" : "count", rules, true, {
      now,
    });
    const decision = result.decisions[0] as CapDecision;
    if (decision.eligibleAt !== undefined) {
      // held by quiet hours, nothing counted: the windows are read by a peek past the quiet check
      ({ windows } = await this.run({ ...send, at: result.at }, "peek", rules, true, { now, quiet: false }));
    }
    const segment = rules.policy.segments.findIndex((s) => s.name === decision.segment);
    const figures = windows.get(0);
    if (!figures) throw new Error("cap-sends replied no windows for the user");
    return frequencyReport(decision, rules.policy.capsFor(segment, request.channel), figures, {
      at: result.at,
      priority: request.priority ?? DEFAULT_PRIORITY,
    });
  }

  private async decide(
    input: CampaignBatchInput,
    mode: "count" | "peek",
    { beforeCount, now }: CapBatchOptions = {},
  ): Promise<CapBatchResult> {
    const batch = parseOrThrow(campaignBatchSchema, input);
    const rules = await this.rules({ channel: batch.channel });
    const before = beforeCount && ((sends: PlannedSends) => beforeCount(batch, sends));
    return (await this.run(batch, mode, rules, false, { beforeCount: before, now })).result;
  }

  private async run(
    batch: Pick<CampaignBatch, "campaignId" | "channel" | "at" | "exempt" | "countExempt" | "defer" | "priority"> & {
      userIds: readonly number[];
    },
    mode: "count" | "peek",
    { policy, segments, zones }: Rules,
    withWindows = false,
    {
      beforeCount,
      now = this.clock.now(),
      quiet = true,
      numbering,
    }: {
      beforeCount?: (sends: PlannedSends) => void;
      now?: number;
      quiet?: boolean;
      /** A part's own profile numbering (runInParts), holding its users' profiles. */
      numbering?: CalendarProfiles;
    } = {},
  ): Promise<Decided> {
    if (!policy.channels.includes(batch.channel)) {
      throw new ValidationError(
        "channel",
        `unknown channel "${batch.channel}" (policy has ${policy.channels.join(", ")})`,
      );
    }
    const at = decisionTime(batch.at, { now: () => now }, policy.backfillMs);

    const { sortedIds, positions } = sortByUser(batch.userIds);
    const segmentOf = segments.resolveSorted(sortedIds);
    beforeCount?.({ userIds: sortedIds, segmentOf, segmentNames: policy.segments.map((segment) => segment.name) });
    // quiet hours hold sends back before anything is counted; exempt sends are not held
    const holds =
      quiet && batch.exempt !== true && policy.hasQuietHours(batch.channel)
        ? quietHolds({
            policy,
            zones,
            channel: batch.channel,
            defer: batch.defer,
            instant: Math.max(at, now),
            sortedIds,
            segmentOf,
          })
        : undefined;
    const decided = holds ? withoutHeld(sortedIds, segmentOf, holds) : { sortedIds, segmentOf, held: undefined };
    const priority = batch.priority ?? DEFAULT_PRIORITY;
    let profiles = this.profiles(policy, batch.channel, priority);
    // the script's profile of each decided user: its segment's, or with calendar caps its segment's in its zone
    let profileOf = decided.segmentOf;
    if (decided.sortedIds.length > 0 && policy.hasCalendarCaps(batch.channel)) {
      const calendar = numbering ?? this.calendarProfiles(policy, batch.channel, priority, profiles, at, now);
      try {
        profileOf = calendar.profileOf(decided.sortedIds, decided.segmentOf, zones);
      } catch (error) {
        if (!(error instanceof ProfileLimitError) || numbering) throw error;
        // more profiles than one numbering holds: the batch's pairs, ascending, fill numberings of their own
        const pairOf = calendar.pairsOf(sortedIds, segmentOf, zones);
        const numberings: CalendarProfiles[] = [];
        const partOf = new Map<number, number>();
        for (const pair of [...new Set(pairOf)].sort((a, b) => a - b)) {
          if (!numberings.at(-1)?.tryNumber(pair)) {
            numberings.push(new CalendarProfiles(policy, profiles, at, countedUntil(at, now)));
            (numberings.at(-1) as CalendarProfiles).tryNumber(pair);
          }
          partOf.set(pair, numberings.length - 1);
        }
        const parts = partsOf(pairOf, positions, partOf).map((part, k) => ({
          positions: part,
          numbering: numberings[k] as CalendarProfiles,
        }));
        if (mode === "count") await this.failIfLost(sortedIds);
        return this.runInParts(batch, mode, { policy, segments, zones }, withWindows, { now, quiet }, parts);
      }
      profiles = calendar.profiles;
    }
    const reportOf = (verdicts: Verdicts, answered?: Uint8Array) =>
      this.report({
        policy,
        at,
        judgedAt: Math.max(at, now),
        channel: batch.channel,
        sortedIds,
        positions,
        segmentOf,
        verdicts,
        holds,
        answered,
        capDefer,
      });
    const call = {
      namespace: this.namespace,
      now,
      at,
      hotRecords: this.hotRecords,
      compactClasses: this.compactClasses,
      horizonMs: keptHorizonMs(policy, this.redeliveryMs),
      channel: batch.channel,
      campaignId: batch.campaignId,
      profiles,
      forced: batch.exempt === true,
    };
    let capDefer: { eligible: CappedEligible; deadline: number } | undefined;
    const { verdicts, windows } =
      decided.sortedIds.length === 0
        ? { verdicts: Verdicts.allExempt(0), windows: new Map<number, UserWindows>() }
        : batch.exempt === true && batch.countExempt !== true
          ? { verdicts: Verdicts.allExempt(sortedIds.length), windows: new Map<number, UserWindows>() }
          : await this.calls
              // the held users ride along in their pages (no send): a page the batch reaches whole stays whole
              .run({
                ...call,
                mode,
                withWindows,
                sortedIds: decided.sortedIds,
                segmentOf: profileOf,
                ...(decided.held ? { held: decided.held } : {}),
              })
              .catch((error: unknown) => {
                if (!(error instanceof PartlyDecidedError)) throw error;
                // a peek counted nothing: its callers see the fault itself
                if (mode === "peek") throw error.cause;
                // what the calls that answered counted stays counted: the caller forwards it, then retries
                const { verdicts, answered } = error.decided as AnsweredVerdicts;
                const partial = reportOf(verdicts, answered);
                const decisions = partial.decisions.filter((decision) => decision !== undefined);
                throw new PartlyDecidedError<CapBatchResult>({ ...partial, decisions }, error.cause);
              });
    // a campaign that defers: its capped sends wait for the instant every cap admits them again
    const judgedAt = Math.max(at, now);
    if (batch.defer && batch.exempt !== true && decided.sortedIds.length > 0) {
      const eligible = await cappedEligibleAt({
        verdicts,
        sortedIds: decided.sortedIds,
        segmentOf: decided.segmentOf,
        profileOf,
        judgedAt,
        policy,
        zones,
        channel: batch.channel,
        peek: (ids, profilesOf) =>
          this.calls
            .run({
              ...call,
              mode: "peek",
              withWindows: true,
              sortedIds: ids,
              segmentOf: profilesOf,
            })
            .then((reply) => reply.windows),
      }).catch((error: unknown) => {
        const cause = error instanceof PartlyDecidedError ? error.cause : error;
        // counted sends stay counted: the caller forwards them, then retries (the capped ones decide again)
        if (mode === "peek") throw cause;
        throw new PartlyDecidedError<CapBatchResult>(reportOf(verdicts), cause);
      });
      if (eligible) capDefer = { eligible, deadline: (batch.defer.since ?? judgedAt) + batch.defer.maxMs };
    }
    // the windows are numbered by the decided users (the held ones are not in the script's calls)
    return { result: reportOf(verdicts), windows, sortedIds: decided.sortedIds };
  }

  /**
   * A batch decided in parts (batch-parts.ts), one after another, each numbering its own profiles; nothing is
   * checked again (`beforeCount` saw the whole batch). A part that fails after others counted reports what
   * was counted, for the caller to forward before it retries the batch.
   */
  private async runInParts(
    batch: Parameters<Capper["run"]>[0],
    mode: "count" | "peek",
    rules: Rules,
    withWindows: boolean,
    options: { now: number; quiet: boolean },
    parts: { positions: number[]; numbering: CalendarProfiles }[],
  ): Promise<Decided> {
    const done: { positions: number[]; result: CapBatchResult }[] = [];
    const windows = new Map<number, UserWindows>();
    const ids: number[] = [];
    for (const { positions, numbering } of parts) {
      const part = { ...batch, userIds: positions.map((position) => batch.userIds[position] as number) };
      let answer: Decided;
      try {
        answer = await this.run(part, mode, rules, withWindows, { ...options, numbering });
      } catch (error) {
        if (mode === "peek") throw error;
        const results = done.map((d) => d.result);
        if (error instanceof PartlyDecidedError)
          throw new PartlyDecidedError<CapBatchResult>(mergeDecided(results, error.decided), error.cause);
        if (done.length > 0) throw new PartlyDecidedError<CapBatchResult>(mergeDecided(results), error);
        throw error;
      }
      for (const [j, figures] of answer.windows) windows.set(ids.length + j, figures);
      ids.push(...answer.sortedIds);
      done.push({ positions, result: answer.result });
    }
    return { result: mergeParts(batch.userIds.length, done), windows, sortedIds: Uint32Array.from(ids) };
  }

  /**
   * Throws the error of a slot of `sortedIds` known lost (onStoreLoss `pause`) before a batch decided in parts
   * counts anything: each part's calls check only their own slots.
   */
  private async failIfLost(sortedIds: Uint32Array): Promise<void> {
    if (!this.store.stillLost) return;
    const tags = new Set(Array.from(sortedIds, (id) => capTagOf(id)));
    const lost = await this.store.stillLost([...tags].map((tag) => capIdentityKey(this.namespace, tag)));
    const first = lost.values().next();
    if (!first.done) throw first.value;
  }

  /**
   * The script's profiles for `channel` and sends of `priority`, worked out once per policy. Without a reserve
   * on the channel every priority shares one set, so batches of any priority share their script calls.
   */
  private profiles(policy: Policy, channel: string, priority: number): ScriptProfile[] {
    let byChannel = this.profileCache.get(policy);
    if (!byChannel) {
      byChannel = new Map();
      this.profileCache.set(policy, byChannel);
    }
    const seen = policy.hasReserves(channel) ? priority : DEFAULT_PRIORITY;
    const key = `${seen}:${channel}`;
    let profiles = byChannel.get(key);
    if (profiles === undefined) {
      profiles = scriptProfiles(policy, channel, this.redeliveryMs, seen);
      byChannel.set(key, profiles);
    }
    return profiles;
  }

  /** The calendar profiles for batches decided at `at` by the clock reading `now` (the latest 16 instants kept). */
  private calendarProfiles(
    policy: Policy,
    channel: string,
    priority: number,
    base: ScriptProfile[],
    at: number,
    now: number,
  ): CalendarProfiles {
    let byInstant = this.calendarCache.get(policy);
    if (!byInstant) {
      byInstant = new Map();
      this.calendarCache.set(policy, byInstant);
    }
    const seen = policy.hasReserves(channel) ? priority : DEFAULT_PRIORITY;
    const key = `${seen}:${channel}:${at}:${now}`;
    let profiles = byInstant.get(key);
    if (profiles === undefined) {
      profiles = new CalendarProfiles(policy, base, at, countedUntil(at, now));
      if (byInstant.size >= 16) byInstant.delete(byInstant.keys().next().value as string);
      byInstant.set(key, profiles);
    }
    return profiles;
  }

  private report(state: {
    policy: Policy;
    at: number;
    channel: string;
    sortedIds: Uint32Array;
    positions: Uint32Array;
    segmentOf: Uint8Array;
    verdicts: Verdicts;
    holds: QuietHolds | undefined;
    judgedAt: number;
    /** Only these decided users (1 each, by the script's numbering) are reported; the others are left out. */
    answered?: Uint8Array;
    /** A deferring campaign's capped sends: when each is admitted again (by the script's numbering), the bound. */
    capDefer?: { eligible: CappedEligible; deadline: number };
  }): CapBatchResult {
    const { policy, at, judgedAt, channel, sortedIds, positions, segmentOf, verdicts, holds, answered, capDefer } =
      state;
    const zoneTotals: Record<string, ZoneTotals> = {};
    const deferred = new Map<number, number[]>();
    // the script decided only the sends not held: its verdicts are numbered without them
    let decidedIndex = 0;
    const decisions = new Array<CapDecision>(sortedIds.length);
    const totals: Record<string, SegmentTotals> = {};
    const names = policy.segments.map((segment) => segment.name);
    const segmentTotals = policy.segments.map(
      (): SegmentTotals => ({ allowed: 0, capped: 0, duplicate: 0, exempt: 0, cappedBy: {} }),
    );
    // per segment, each cap of the channel and its label, looked up once per batch
    const capsOf = policy.segments.map(() => undefined as { cap: CapRule; label: string }[] | undefined);
    let previous: DecisionKind = "allowed";
    let previousCap = 0;
    let previousAnswered = true;
    let previousSource = 0;
    for (let j = 0; j < sortedIds.length; j++) {
      const segment = segmentOf[j] as number;
      const held = holds ? (holds.kinds[j] as number) : NOT_HELD;
      if (held !== NOT_HELD) {
        this.held(j, held, { sortedIds, segmentOf, names, segmentTotals, decisions, positions }, holds as QuietHolds);
        const zone = (holds as QuietHolds).zoneNames[(holds as QuietHolds).zoneOf[j] as number] as string;
        const kindName = HELD_NAMES[held] as "quiet" | "deferred" | "dropped";
        zoneTotals[zone] ??= { quiet: 0, deferred: 0, dropped: 0 };
        zoneTotals[zone][kindName]++;
        if (held === HELD_DEFERRED && (j === 0 || sortedIds[j] !== sortedIds[j - 1])) {
          const eligibleAt = (holds as QuietHolds).eligibleAt[j] as number;
          const users = deferred.get(eligibleAt) ?? [];
          if (users.length === 0) deferred.set(eligibleAt, users);
          users.push(sortedIds[j] as number);
        }
        continue;
      }
      const v = decidedIndex++;
      let kind = verdicts.decision(v);
      let capIndex = kind === "capped" || kind === "displaced" ? verdicts.capIndex(v) : 0;
      let isAnswered = answered === undefined || answered[v] === 1;
      let source = v;
      if (j > 0 && sortedIds[j] === sortedIds[j - 1]) {
        // A repeat of an ID in the same batch: once the first is counted, the rest are duplicates.
        kind = previous === "allowed" || previous === "duplicate" ? "duplicate" : previous;
        capIndex = previousCap;
        isAnswered = previousAnswered;
        source = previousSource;
      }
      previousSource = source;
      previous = kind;
      previousCap = capIndex;
      previousAnswered = isAnswered;
      if (!isAnswered) continue;
      const counts = segmentTotals[segment] as SegmentTotals;
      const decision: CapDecision = {
        userId: sortedIds[j] as number,
        segment: names[segment] as string,
        decision: kind,
      };
      if (kind === "capped" || kind === "displaced") {
        let caps = capsOf[segment];
        if (caps === undefined) {
          caps = policy.capsFor(segment, channel).map((cap) => ({ cap, label: `${cap.channel}:${cap.window}` }));
          capsOf[segment] = caps;
        }
        const named = caps[capIndex];
        if (!named) throw new Error(`cap-sends named cap ${capIndex}, which the policy does not have`);
        decision.cap = named.cap;
        const eligibleAt = capDefer ? (capDefer.eligible[source] as number) : Number.NaN;
        if (capDefer) {
          // deferred to when every cap admits it again, within the bound; else dropped (never: no eligibleAt)
          const deferredKind = eligibleAt <= capDefer.deadline ? "deferred" : "dropped";
          decision.decision = deferredKind;
          if (!Number.isNaN(eligibleAt)) decision.eligibleAt = eligibleAt;
          counts[deferredKind] = (counts[deferredKind] ?? 0) + 1;
          const byKey = deferredKind === "deferred" ? "deferredBy" : "droppedBy";
          counts[byKey] ??= {};
          const by = counts[byKey];
          by[named.label] = (by[named.label] ?? 0) + 1;
          if (deferredKind === "deferred" && source === v) {
            const users = deferred.get(eligibleAt) ?? [];
            if (users.length === 0) deferred.set(eligibleAt, users);
            users.push(sortedIds[j] as number);
          }
        } else if (kind === "capped") {
          counts.capped++;
          counts.cappedBy[named.label] = (counts.cappedBy[named.label] ?? 0) + 1;
        } else {
          counts.displaced = (counts.displaced ?? 0) + 1;
          counts.displacedBy ??= {};
          counts.displacedBy[named.label] = (counts.displacedBy[named.label] ?? 0) + 1;
        }
      } else {
        counts[kind as "allowed" | "duplicate" | "exempt"]++;
      }
      decisions[positions[j] as number] = decision;
    }
    policy.segments.forEach(({ name }, segment) => {
      const counts = segmentTotals[segment] as SegmentTotals;
      const held = (counts.quiet ?? 0) + (counts.deferred ?? 0) + (counts.dropped ?? 0) + (counts.displaced ?? 0);
      if (counts.allowed + counts.capped + counts.duplicate + counts.exempt + held > 0) totals[name] = counts;
    });
    const result: CapBatchResult = { at, policyVersion: policy.version, decisions, totals };
    if (holds || capDefer) {
      const groups: DeferredSends[] = [...deferred]
        .sort(([a], [b]) => a - b)
        .map(([eligibleAt, userIds]) => ({ eligibleAt, userIds }));
      result.held = { judgedAt, zones: zoneTotals, deferred: groups };
    }
    return result;
  }

  /** The decision of a send quiet hours hold back (`held`: its HELD_* kind). */
  private held(
    j: number,
    held: number,
    state: {
      sortedIds: Uint32Array;
      segmentOf: Uint8Array;
      names: readonly string[];
      segmentTotals: SegmentTotals[];
      decisions: CapDecision[];
      positions: Uint32Array;
    },
    holds: QuietHolds,
  ): void {
    const segment = state.segmentOf[j] as number;
    const kind = HELD_NAMES[held] as "quiet" | "deferred" | "dropped";
    const counts = state.segmentTotals[segment] as SegmentTotals;
    counts[kind] = (counts[kind] ?? 0) + 1;
    state.decisions[state.positions[j] as number] = {
      userId: state.sortedIds[j] as number,
      segment: state.names[segment] as string,
      decision: kind,
      eligibleAt: holds.eligibleAt[j] as number,
      zone: holds.zoneNames[holds.zoneOf[j] as number] as string,
    };
  }
}

/** The sorted sends quiet hours do not hold back, for the script, and the held users (each once). */
function withoutHeld(
  sortedIds: Uint32Array,
  segmentOf: Uint8Array,
  holds: QuietHolds,
): { sortedIds: Uint32Array; segmentOf: Uint8Array; held: Uint32Array } {
  const kept = sortedIds.length - holds.count;
  const ids = new Uint32Array(kept);
  const segments = new Uint8Array(kept);
  const held = new Uint32Array(holds.count);
  let k = 0;
  let h = 0;
  for (let j = 0; j < sortedIds.length; j++) {
    const id = sortedIds[j] as number;
    if (holds.kinds[j] !== NOT_HELD) {
      // a repeated ID is held at every occurrence (the same segment and zone)
      if (h === 0 || held[h - 1] !== id) held[h++] = id;
      continue;
    }
    ids[k] = id;
    segments[k++] = segmentOf[j] as number;
  }
  return { sortedIds: ids, segmentOf: segments, held: held.subarray(0, h) };
}

/** Sorts user IDs ascending, remembering each one's input position. */
function sortByUser(userIds: readonly number[]): { sortedIds: Uint32Array; positions: Uint32Array } {
  // campaign tools mostly send IDs in order: one pass finds that, and the sort is skipped
  let ascending = true;
  for (let i = 1; i < userIds.length && ascending; i++)
    ascending = (userIds[i - 1] as number) <= (userIds[i] as number);
  if (ascending) {
    const positions = new Uint32Array(userIds.length);
    for (let i = 0; i < positions.length; i++) positions[i] = i;
    return { sortedIds: Uint32Array.from(userIds), positions };
  }
  const keys = new Float64Array(userIds.length);
  for (let i = 0; i < userIds.length; i++) keys[i] = (userIds[i] as number) * POSITION_SPAN + i;
  keys.sort();
  const sortedIds = new Uint32Array(keys.length);
  const positions = new Uint32Array(keys.length);
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i] as number;
    const position = key % POSITION_SPAN;
    positions[i] = position;
    sortedIds[i] = (key - position) / POSITION_SPAN;
  }
  return { sortedIds, positions };
}
