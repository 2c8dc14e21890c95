// A reference model of lua/cap-sends/, written to be obviously right rather than fast: each user's
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

/** What POST /v1/frequency reports of one user (the shape of cap-sends-script.ts's UserWindows). */
export interface ModelWindows {
  caps: { used: number; resetAt: number }[];
  retryAt?: number;
}

/**
 * The windows of a frequency check at `at`, from the user's whole log after the call (every live send,
 * whatever its age or channel), by brute force:
 *   used: the most sends any window (y - W, y] containing `at` holds, trying every y from `at` to `at + W - 1`;
 *   resetAt: the oldest send of the first such window that holds `used` plus W (`at` when used is 0);
 *   retryAt (capped only; none when a cap's max is 0): the first millisecond after `at` at which every
 *   cap's every window around it holds fewer than max (the decision's rule), tried one by one.
 */
export function modelWindows(
  log: readonly ModelSend[],
  caps: readonly { channel: string; windowMs: number; max: number }[],
  at: number,
  capped: boolean,
): ModelWindows {
  const timesOf = caps.map((cap) =>
    log
      .filter((send) => cap.channel === "*" || send.channel === cap.channel)
      .map((send) => send.at)
      .sort((a, b) => a - b),
  );
  // how many of the ascending `times` are at or before t (a binary search: the brute force below stays fast)
  const upTo = (times: number[], t: number) => {
    let low = 0;
    let high = times.length;
    while (low < high) {
      const middle = (low + high) >> 1;
      if ((times[middle] as number) <= t) low = middle + 1;
      else high = middle;
    }
    return low;
  };
  const inside = (times: number[], y: number, windowMs: number) => upTo(times, y) - upTo(times, y - windowMs);
  const result: ModelWindows = {
    caps: caps.map((cap, i) => {
      const times = timesOf[i] as number[];
      let used = 0;
      let oldest = 0;
      for (let y = at; y < at + cap.windowMs; y++) {
        const held = inside(times, y, cap.windowMs);
        if (held > used) [used, oldest] = [held, times[upTo(times, y - cap.windowMs)] as number];
      }
      return { used, resetAt: used > 0 ? oldest + cap.windowMs : at };
    }),
  };
  if (!capped || caps.some((cap) => cap.max === 0)) return result;
  // a window around x can only be fullest at y = x or at a send's time: the count rises only there
  const fullestAround = (times: number[], x: number, windowMs: number) => {
    let fullest = inside(times, x, windowMs);
    for (let k = upTo(times, x); k < times.length && (times[k] as number) < x + windowMs; k++)
      fullest = Math.max(fullest, inside(times, times[k] as number, windowMs));
    return fullest;
  };
  const last = Math.max(...log.map((send) => send.at)) + Math.max(...caps.map((cap) => cap.windowMs));
  for (let x = at + 1; x <= last + 1; x++) {
    if (caps.every((cap, i) => fullestAround(timesOf[i] as number[], x, cap.windowMs) < cap.max)) {
      result.retryAt = x;
      return result;
    }
  }
  throw new Error("model: no time after the last send allowed the check");
}
