// What the capper decides: one decision per send, the totals per segment, and the batch result. Types
// only, so the frequency report, delivery and the consumer can name them without the capper.
import type { CapRule } from "./policy.ts";

/**
 * `displaced`: refused by the room a cap reserves for higher priorities (the caps' own maxima had room);
 * `quiet`: inside quiet hours and not deferred (dropped); `deferred`: inside quiet hours, or capped or
 * displaced in a campaign that defers (then with its `cap`), re-decided at its `eligibleAt`; `dropped`: the
 * same with an `eligibleAt` past the campaign's deferral bound (or none: a cap of 0). None of these is
 * counted or delivered.
 */
export type DecisionKind =
  | "allowed"
  | "capped"
  | "displaced"
  | "duplicate"
  | "exempt"
  | "quiet"
  | "deferred"
  | "dropped";

/** Decisions held back by quiet hours or deferred caps (never counted, never delivered now). */
export const HELD_KINDS: ReadonlySet<DecisionKind> = new Set(["quiet", "deferred", "dropped"]);

export interface CapDecision {
  userId: number;
  segment: string;
  decision: DecisionKind;
  /**
   * The first cap (in policy order: the channel's own, then "*") that denied the send; for a displaced one,
   * the first whose room for the send's priority (max less the reserve above it) was full.
   */
  cap?: CapRule;
  /**
   * Held by quiet hours: the earliest instant outside them, in the user's zone. Deferred or dropped by a cap:
   * the earliest instant at which every cap admits the send, past quiet hours at that instant.
   */
  eligibleAt?: number;
  /** Held by quiet hours: the user's zone. */
  zone?: string;
}

export interface SegmentTotals {
  allowed: number;
  capped: number;
  duplicate: number;
  exempt: number;
  /** Capped sends by the cap that bit, labelled `<channel>:<window>` (e.g. `push:1d`, `*:7d`). */
  cappedBy: Record<string, number>;
  /**
   * Refused by a reserve for higher priorities (present only when some were), and by the cap whose reserve it
   * was, labelled as `cappedBy`'s.
   */
  displaced?: number;
  displacedBy?: Record<string, number>;
  /**
   * Held by quiet hours or deferred caps (present only when some were): dropped, deferred, dropped past the
   * deferral bound.
   */
  quiet?: number;
  deferred?: number;
  dropped?: number;
  /** Of `deferred` and `dropped`, the capped or displaced sends, by the cap that bit (labelled as `cappedBy`'s). */
  deferredBy?: Record<string, number>;
  droppedBy?: Record<string, number>;
}

/** What quiet hours held back in one zone. */
export interface ZoneTotals {
  quiet: number;
  deferred: number;
  dropped: number;
}

/** Sends deferred to one instant: re-decided then, each user once (ascending). */
export interface DeferredSends {
  eligibleAt: number;
  userIds: number[];
}

export interface CapBatchResult {
  /** The send time the caps were evaluated at. */
  at: number;
  policyVersion: string;
  /** One per input user ID, in input order. */
  decisions: CapDecision[];
  totals: Record<string, SegmentTotals>;
  /**
   * Present when quiet hours held sends back or a deferring campaign had capped sends: quiet hours' by zone,
   * and every deferred one by its eligibleAt (ascending).
   */
  held?: {
    /** The instant quiet hours and deferrals were judged at: the later of `at` and the clock's reading. */
    judgedAt: number;
    zones: Record<string, ZoneTotals>;
    deferred: DeferredSends[];
  };
}
