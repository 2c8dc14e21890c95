// A reference model of priority headroom, written from the contract (docs/api.md, "Policy" and the campaign
// batch's `priority`), not from the script: each user's counted sends as a list, every window checked by brute
// force. A send of priority p is allowed only while every window of each cap's length that contains its `at`
// holds, with it, at most the cap's max less the slots reserved for priorities above p. Refused by a cap's own
// max it is capped; refused only by the reserves, displaced.
import { parseDuration } from "../../functions/core/shared/duration.ts";
import { worstWindowWith } from "./capping-model.ts";

/** The named priorities as the contract states them (higher goes first). */
export const MODEL_PRIORITIES: Record<string, number> = { promotional: 0, triggered: 50, transactional: 100 };

/** A cap as the policy document writes it. */
export interface ModelCap {
  window: string;
  max: number;
  reserve?: Record<string, number>;
}

export type PriorityDecision = "allowed" | "duplicate" | "exempt" | { capped: number } | { displaced: number };

export interface PrioritySend {
  user: number;
  at: number;
  /** A name or a number; absent: promotional. */
  priority?: string | number;
  campaignId: string;
  exempt?: boolean;
  countExempt?: boolean;
}

export const priorityOf = (priority: string | number | undefined): number =>
  priority === undefined ? 0 : typeof priority === "number" ? priority : (MODEL_PRIORITIES[priority] as number);

/** The slots of `cap` a send of priority `p` may not take: reserves for priorities strictly above p. */
export function modelReserved(cap: ModelCap, p: number): number {
  let slots = 0;
  for (const [key, n] of Object.entries(cap.reserve ?? {})) {
    const q = key in MODEL_PRIORITIES ? (MODEL_PRIORITIES[key] as number) : Number(key);
    if (q > p) slots += n;
  }
  return slots;
}

export class PriorityModel {
  private readonly counted = new Map<number, { at: number; campaignId: string }[]>();

  constructor(private readonly caps: readonly ModelCap[]) {}

  /** Decides the send and counts it when allowed (or exempt and counted). */
  apply(send: PrioritySend): PriorityDecision {
    const log = this.counted.get(send.user) ?? [];
    this.counted.set(send.user, log);
    if (send.exempt && !send.countExempt) return "exempt";
    if (send.campaignId !== "" && log.some((s) => s.campaignId === send.campaignId)) return "duplicate";
    const decision = send.exempt ? "exempt" : this.decide(log, send);
    if (decision === "allowed" || decision === "exempt") log.push({ at: send.at, campaignId: send.campaignId });
    return decision;
  }

  /** The counted times of a user. */
  timesOf(user: number): number[] {
    return (this.counted.get(user) ?? []).map((s) => s.at);
  }

  private decide(log: readonly { at: number }[], send: PrioritySend): PriorityDecision {
    const times = log.map((s) => s.at);
    const p = priorityOf(send.priority);
    const worst = this.caps.map((cap) => worstWindowWith(times, send.at, parseDuration(cap.window) as number));
    const capped = this.caps.findIndex((cap, i) => (worst[i] as number) > cap.max);
    if (capped >= 0) return { capped };
    const displaced = this.caps.findIndex((cap, i) => (worst[i] as number) > cap.max - modelReserved(cap, p));
    if (displaced >= 0) return { displaced };
    return "allowed";
  }
}
