// A reference model of lua/cap-sends.lua, written to be obviously right rather than fast: each user's
// counted sends as a plain list, every window checked by brute force. Property tests compare the script to it.
import { DEFAULT_REDELIVERY_MS, keptMs, type Policy } from "../../functions/core/capping/policy.ts";

export type ModelDecision = "allowed" | "duplicate" | "exempt" | { capped: number };

export interface ModelSend {
  at: number;
  channel: string;
  campaignId: string;
}

export interface ModelCall {
  mode: "count" | "peek";
  /** The caller's clock; never decreases from call to call. */
  now: number;
  at: number;
  channel: string;
  /** "" is anonymous: no idempotency. */
  campaignId: string;
  exemptCounted: boolean;
  /** Distinct user IDs. */
  users: number[];
}

export class CappingModel {
  private readonly sends = new Map<number, ModelSend[]>();

  constructor(
    private readonly policy: Policy,
    private readonly segmentOf: (user: number) => number,
    /** The Capper's redeliveryMs: named sends are kept at least this long after they were counted. */
    private readonly redeliveryMs = DEFAULT_REDELIVERY_MS,
  ) {}

  /** The decision for each user of the call, in order; counts the allowed and exempt ones in "count" mode. */
  apply(call: ModelCall): ModelDecision[] {
    return call.users.map((user) => {
      const decision = this.decide(user, call);
      if (call.mode === "count" && (decision === "allowed" || decision === "exempt")) {
        this.sendsOf(user).push({ at: call.at, channel: call.channel, campaignId: call.campaignId });
      }
      return decision;
    });
  }

  /** Every counted send of the user (the model never forgets one; retention only hides old ones). */
  sendsOf(user: number): ModelSend[] {
    let list = this.sends.get(user);
    if (!list) {
      list = [];
      this.sends.set(user, list);
    }
    return list;
  }

  users(): number[] {
    return [...this.sends.keys()];
  }

  private decide(user: number, call: ModelCall): ModelDecision {
    const segment = this.segmentOf(user);
    // sends kept by the script: newer than now - the longer of what windows and idempotency need (older
    // sends are outside every window a valid `at` is decided in, so only idempotency can see them)
    const kept = keptMs(this.policy, segment, this.redeliveryMs);
    const live = this.sendsOf(user).filter((send) => send.at > call.now - kept);
    if (call.campaignId !== "" && live.some((s) => s.channel === call.channel && s.campaignId === call.campaignId)) {
      return "duplicate";
    }
    if (call.exemptCounted) return "exempt";
    const caps = this.policy.capsFor(segment, call.channel);
    for (let i = 0; i < caps.length; i++) {
      const cap = caps[i] as (typeof caps)[number];
      const counted = live.filter((s) => cap.channel === "*" || s.channel === cap.channel).map((s) => s.at);
      if (worstWindowWith(counted, call.at, cap.windowMs) > cap.max) return { capped: i };
    }
    return "allowed";
  }
}

/**
 * The most sends any window (x - W, x] containing `at` would hold with a send at `at` added: every right
 * end x from `at` to `at + W - 1` is tried, by brute force over the candidate ends where the count changes.
 */
export function worstWindowWith(times: readonly number[], at: number, windowMs: number): number {
  const ends = [at, ...times.filter((t) => t >= at && t < at + windowMs)];
  let worst = 0;
  for (const end of ends) {
    const inside = times.filter((t) => t > end - windowMs && t <= end).length + 1;
    worst = Math.max(worst, inside);
  }
  return worst;
}

/** The largest number of the times that any window (x - W, x] holds, over every x. */
export function fullestWindow(times: readonly number[], windowMs: number): number {
  let fullest = 0;
  for (const end of times) {
    fullest = Math.max(fullest, times.filter((t) => t > end - windowMs && t <= end).length);
  }
  return fullest;
}
