// The campaign capper: decides a whole batch of sends against the policy's caps, in as few script calls
// as the key layout allows (one per slot group of USERS_PER_GROUP consecutive user IDs), all in flight at once.

import type { Clock } from "../shared/clock.ts";
import { decisionTime, systemClock } from "../shared/clock.ts";
import { ValidationError } from "../shared/errors.ts";
import {
  BLOCKS_PER_GROUP,
  blockInGroupOf,
  capBlockKey,
  checkNamespace,
  DEFAULT_NAMESPACE,
  groupOf,
  offsetInBlockOf,
} from "../shared/keys.ts";
import { parseOrThrow } from "../shared/validation.ts";
import { type CampaignBatchInput, campaignBatchSchema } from "./campaign-batch.ts";
import type { CapBatchResult, CapDecision, SegmentTotals } from "./decisions.ts";
import { type FrequencyResult, frequencyReport, frequencyRequestSchema } from "./frequency.ts";
import type { Policy } from "./policy.ts";
import type { Rules } from "./rules-source.ts";

/**
 * What the capper needs from the counter store: run `lua/cap-sends.lua` on the BLOCKS_PER_GROUP keys of
 * one slot group.
 */
export interface CapStore {
  capSends(keys: readonly string[], args: readonly (string | Buffer)[]): Promise<Buffer>;
}

export interface CapperOptions {
  store: CapStore;
  /** The current policy and segments; read once per batch, so a swap never splits a batch. */
  rules: () => Rules | Promise<Rules>;
  clock?: Clock;
  namespace?: string;
}

const FORCED_PROFILE = 255;
const REPLY_ALLOWED = 0;
const REPLY_DUPLICATE = 1;
const REPLY_EXEMPT = 2;
const REPLY_FIRST_CAP = 3;
/** Sort key = userId * 2^20 + input position: exact in a double because user IDs have 32 bits. */
const POSITION_SPAN = 2 ** 20;
const EMPTY = Buffer.alloc(0);

interface ScriptCall {
  keys: string[];
  args: (string | Buffer)[];
  /** Indices into the sorted arrays, in the order of the script's reply bytes. */
  members: number[];
}

export class Capper {
  private readonly store: CapStore;
  private readonly rules: () => Rules | Promise<Rules>;
  private readonly clock: Clock;
  private readonly namespace: string;
  private readonly capSpecs = new WeakMap<Policy, Map<string, string>>();

  constructor(options: CapperOptions) {
    this.store = options.store;
    this.rules = options.rules;
    this.clock = options.clock ?? systemClock;
    this.namespace = checkNamespace(options.namespace ?? DEFAULT_NAMESPACE);
  }

  /** Decides every send of the batch and counts the allowed ones. */
  capBatch(input: CampaignBatchInput): Promise<CapBatchResult> {
    return this.decide(input, "count");
  }

  /** The decisions `capBatch` would make now, changing nothing. */
  peek(input: CampaignBatchInput): Promise<CapBatchResult> {
    return this.decide(input, "peek");
  }

  /**
   * One user on one channel (POST /v1/frequency): the decision, counted unless `consume` is false, and
   * every applicable window with what is used and left. Without a campaign ID every consuming check counts.
   */
  async checkUser(input: unknown): Promise<FrequencyResult> {
    const request = parseOrThrow(frequencyRequestSchema, input);
    const rules = await this.rules();
    // one call: the decision and the user's log as the decision left it (atomic, one round trip)
    const { result, log } = await this.run(
      { campaignId: request.campaignId ?? "", channel: request.channel, userIds: [request.userId], at: request.at },
      request.consume === false ? "peek" : "count",
      rules,
      true,
    );
    const decision = result.decisions[0] as CapDecision;
    const history = log
      .split("\n")
      .filter(Boolean)
      .map((line) => {
        const space = line.indexOf(" ");
        return { at: Number(line.slice(0, space)), identity: line.slice(space + 1) };
      });
    const segment = rules.policy.segments.findIndex((s) => s.name === decision.segment);
    return frequencyReport(decision, rules.policy.capsFor(segment, request.channel), history, result.at);
  }

  private async decide(input: CampaignBatchInput, mode: "count" | "peek"): Promise<CapBatchResult> {
    const batch = parseOrThrow(campaignBatchSchema, input);
    return (await this.run(batch, mode, await this.rules())).result;
  }

  private async run(
    batch: Pick<CampaignBatchInput, "campaignId" | "channel" | "at" | "exempt" | "countExempt"> & {
      userIds: readonly number[];
    },
    mode: "count" | "peek",
    { policy, segments }: Rules,
    withLog = false,
  ): Promise<{ result: CapBatchResult; log: string }> {
    if (!policy.channels.includes(batch.channel)) {
      throw new ValidationError(
        "channel",
        `unknown channel "${batch.channel}" (policy has ${policy.channels.join(", ")})`,
      );
    }
    const at = decisionTime(batch.at, this.clock);

    const { sortedIds, positions } = sortByUser(batch.userIds);
    const segmentOf = segments.resolveSorted(sortedIds);
    const replies = new Uint8Array(sortedIds.length);
    let log = "";
    const uncounted = batch.exempt === true && batch.countExempt !== true;
    if (uncounted) {
      replies.fill(REPLY_EXEMPT);
    } else {
      const forced = batch.exempt === true;
      const calls = this.planCalls(sortedIds, segmentOf, forced);
      const common = [
        String(at),
        withLog ? `${mode}+log` : mode,
        String(policy.horizonMs),
        `${batch.channel}:${batch.campaignId}`,
        this.capSpec(policy, batch.channel),
      ];
      const results = await Promise.all(calls.map((call) => this.store.capSends(call.keys, [...common, ...call.args])));
      results.forEach((reply, c) => {
        const { members } = calls[c] as ScriptCall;
        if (withLog ? reply.length < members.length : reply.length !== members.length) {
          throw new Error(`cap-sends replied ${reply.length} bytes for ${members.length} users`);
        }
        for (let m = 0; m < members.length; m++) replies[members[m] as number] = reply[m] as number;
        if (withLog) log += reply.subarray(members.length).toString("latin1");
      });
    }
    return {
      result: this.report({ policy, at, channel: batch.channel, sortedIds, positions, segmentOf, replies }),
      log,
    };
  }

  /** One script call per slot group: every block key of the group, and per block 2 bytes per distinct user. */
  private planCalls(sortedIds: Uint32Array, segmentOf: Uint8Array, forced: boolean): ScriptCall[] {
    const calls: ScriptCall[] = [];
    let i = 0;
    while (i < sortedIds.length) {
      const group = groupOf(sortedIds[i] as number);
      const call: ScriptCall = { keys: [], args: new Array(BLOCKS_PER_GROUP).fill(EMPTY), members: [] };
      for (let block = 0; block < BLOCKS_PER_GROUP; block++) call.keys.push(capBlockKey(this.namespace, group, block));
      while (i < sortedIds.length && groupOf(sortedIds[i] as number) === group) {
        const block = blockInGroupOf(sortedIds[i] as number);
        let end = i;
        while (
          end < sortedIds.length &&
          groupOf(sortedIds[end] as number) === group &&
          blockInGroupOf(sortedIds[end] as number) === block
        )
          end++;
        const users = Buffer.allocUnsafe(2 * (end - i));
        let length = 0;
        for (let j = i; j < end; j++) {
          if (j > i && sortedIds[j] === sortedIds[j - 1]) continue; // a repeated ID is decided once
          users[length++] = offsetInBlockOf(sortedIds[j] as number);
          users[length++] = forced ? FORCED_PROFILE : (segmentOf[j] as number);
          call.members.push(j);
        }
        call.args[block] = users.subarray(0, length);
        i = end;
      }
      calls.push(call);
    }
    return calls;
  }

  /** The script's cap argument: every segment's caps for `channel`, in segment order (see lua/cap-sends.lua). */
  private capSpec(policy: Policy, channel: string): string {
    let byChannel = this.capSpecs.get(policy);
    if (!byChannel) {
      byChannel = new Map();
      this.capSpecs.set(policy, byChannel);
    }
    let spec = byChannel.get(channel);
    if (spec === undefined) {
      spec = policy.segments
        .map((_, segment) =>
          policy
            .capsFor(segment, channel)
            .map((cap) => `${cap.windowMs}:${cap.max}:${cap.channel === channel ? 0 : 1}`)
            .join(","),
        )
        .join("|");
      byChannel.set(channel, spec);
    }
    return spec;
  }

  private report(state: {
    policy: Policy;
    at: number;
    channel: string;
    sortedIds: Uint32Array;
    positions: Uint32Array;
    segmentOf: Uint8Array;
    replies: Uint8Array;
  }): CapBatchResult {
    const { policy, at, channel, sortedIds, positions, segmentOf, replies } = state;
    const decisions = new Array<CapDecision>(sortedIds.length);
    const totals: Record<string, SegmentTotals> = {};
    const segmentTotals = policy.segments.map(
      (): SegmentTotals => ({ allowed: 0, capped: 0, duplicate: 0, exempt: 0, cappedBy: {} }),
    );
    let previous = REPLY_ALLOWED;
    for (let j = 0; j < sortedIds.length; j++) {
      let reply = replies[j] as number;
      if (j > 0 && sortedIds[j] === sortedIds[j - 1]) {
        // A repeat of an ID in the same batch: once the first is counted, the rest are duplicates.
        reply = previous === REPLY_ALLOWED || previous === REPLY_DUPLICATE ? REPLY_DUPLICATE : previous;
      }
      previous = reply;
      const segment = segmentOf[j] as number;
      const counts = segmentTotals[segment] as SegmentTotals;
      const decision: CapDecision = {
        userId: sortedIds[j] as number,
        segment: (policy.segments[segment] as { name: string }).name,
        decision: "allowed",
      };
      if (reply === REPLY_ALLOWED) {
        counts.allowed++;
      } else if (reply === REPLY_DUPLICATE) {
        decision.decision = "duplicate";
        counts.duplicate++;
      } else if (reply === REPLY_EXEMPT) {
        decision.decision = "exempt";
        counts.exempt++;
      } else {
        const cap = policy.capsFor(segment, channel)[reply - REPLY_FIRST_CAP];
        if (!cap) throw new Error(`cap-sends named cap ${reply - REPLY_FIRST_CAP}, which the policy does not have`);
        decision.decision = "capped";
        decision.cap = cap;
        counts.capped++;
        const label = `${cap.channel}:${cap.window}`;
        counts.cappedBy[label] = (counts.cappedBy[label] ?? 0) + 1;
      }
      decisions[positions[j] as number] = decision;
    }
    policy.segments.forEach(({ name }, segment) => {
      const counts = segmentTotals[segment] as SegmentTotals;
      if (counts.allowed + counts.capped + counts.duplicate + counts.exempt > 0) totals[name] = counts;
    });
    return { at, policyVersion: policy.version, decisions, totals };
  }
}

/** Sorts user IDs ascending, remembering each one's input position. */
function sortByUser(userIds: readonly number[]): { sortedIds: Uint32Array; positions: Uint32Array } {
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
