// What the capper decides: one decision per send, the totals per segment, and the batch result. Types
// only, so the frequency report, delivery and the consumer can name them without the capper.
import type { CapRule } from "./policy.ts";

export type DecisionKind = "allowed" | "capped" | "duplicate" | "exempt";

export interface CapDecision {
  userId: number;
  segment: string;
  decision: DecisionKind;
  /** The first cap (in policy order: the channel's own, then "*") that denied the send. */
  cap?: CapRule;
}

export interface SegmentTotals {
  allowed: number;
  capped: number;
  duplicate: number;
  exempt: number;
  /** Capped sends by the cap that bit, labelled `<channel>:<window>` (e.g. `push:1d`, `*:7d`). */
  cappedBy: Record<string, number>;
}

export interface CapBatchResult {
  /** The send time the caps were evaluated at. */
  at: number;
  policyVersion: string;
  /** One per input user ID, in input order. */
  decisions: CapDecision[];
  totals: Record<string, SegmentTotals>;
}
