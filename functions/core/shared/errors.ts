// Tollgate's error hierarchy. A denial is a value (a decision), never an exception: these are for bad
// input and for faults. Only ValidationError messages are meant for callers (4xx); the rest are 5xx.

export class TollgateError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Input that crossed a boundary and failed validation. `path` names the field, e.g. `userIds[3]`. */
export class ValidationError extends TollgateError {
  readonly path: string;
  constructor(path: string, message: string, options?: { cause?: unknown }) {
    super(path ? `${path}: ${message}` : message, options);
    this.path = path;
  }
}

/** A policy file that must not be activated. `issues` lists every problem, each naming its field. */
export class InvalidPolicyError extends ValidationError {
  readonly issues: readonly string[];
  constructor(issues: readonly string[]) {
    super("", `invalid policy: ${issues.join("; ")}`);
    this.issues = issues;
  }
}

/** A segment bitmap object that is not a valid portable roaring bitmap. */
export class CorruptBitmapError extends ValidationError {
  constructor(source: string, options?: { cause?: unknown }) {
    const detail =
      options?.cause instanceof Error && !options.cause.message.includes("\n") ? `: ${options.cause.message}` : "";
    super(source, `not a valid portable roaring bitmap (CRoaring portable serialization)${detail}`, options);
  }
}

/**
 * A new bitmap that would shrink its segment by more than the allowed share: more likely a bad export
 * than a real change. Refused (the last good rules stay) unless the operator forced that upload.
 */
export class SegmentShrinkError extends TollgateError {
  readonly key: string;
  constructor(options: { segment: string; key: string; before: number; after: number; maxShrink: number }) {
    const { segment, key, before, after, maxShrink } = options;
    super(
      `${key}: segment "${segment}" would shrink from ${before} to ${after} users (-${Math.round((100 * (before - after)) / before)}%, ` +
        `more than the ${Math.round(maxShrink * 100)}% allowed); upload it with --allow-shrink if that is intended`,
    );
    this.key = key;
  }
}

/**
 * Two published zone bitmaps that share users: a user lives in one zone. The zones are refused together
 * (the last good rules stay), naming both objects.
 */
export class ZoneOverlapError extends ValidationError {
  constructor(a: string, b: string, count: number) {
    super("zones", `zones/${a}.roaring and zones/${b}.roaring share ${count} users; a user lives in one zone`);
  }
}

/** Segments given to the builder that share user IDs; segments must be disjoint. */
export class SegmentOverlapError extends ValidationError {
  readonly overlaps: readonly { a: string; b: string; count: number }[];
  constructor(overlaps: readonly { a: string; b: string; count: number }[]) {
    super(
      "segments",
      `segments must be disjoint: ${overlaps
        .map(({ a, b, count }) => `${count} user ID${count === 1 ? "" : "s"} in both "${a}" and "${b}"`)
        .join(", ")}`,
    );
    this.overlaps = overlaps;
  }
}

/** A conditional write refused: the object changed since the version the write was made from. */
export class WriteConflictError extends TollgateError {
  readonly key: string;
  constructor(key: string, message: string, options?: { cause?: unknown }) {
    super(`${key}: ${message}`, options);
    this.key = key;
  }
}

/**
 * An editor's save refused because the object changed since that editor opened it (another editor saved
 * first): nothing of the save was written; the editor reopens and makes the change again on top.
 */
export class ChangedSinceOpenedError extends TollgateError {
  readonly key: string;
  constructor(key: string, what: string) {
    super(`${key}: ${what} changed since you opened it; nothing was saved: reopen it and make your change again`);
    this.key = key;
  }
}

/** An object the store does not hold (a missing bitmap or policy). */
export class ObjectNotFoundError extends TollgateError {
  readonly key: string;
  constructor(key: string, options?: { cause?: unknown }) {
    super(`object not found: ${key}`, options);
    this.key = key;
  }
}

/**
 * The counter store (Redis) did not answer: a timeout, a refused or dropped connection, the cluster down,
 * the circuit open. Nothing was decided for the affected users; the caller fails closed and may retry.
 * `mayHaveRun`: the command had been handed to a connection when the caller gave up, so it may still have
 * run on Redis (a charge may have landed); false when it provably did not (never sent, or a reply such
 * as MOVED or CLUSTERDOWN that Redis gives instead of running it).
 */
export class StoreUnavailableError extends TollgateError {
  readonly mayHaveRun: boolean;
  constructor(message: string, options: { cause?: unknown; mayHaveRun?: boolean } = {}) {
    super(message, options);
    this.mayHaveRun = options.mayHaveRun ?? true;
  }
}

/**
 * The counter store answered with an error: a script error, CROSSSLOT, an argument out of range. Redis is
 * up, so this is a defect, never an outage: it is logged with the reply, never retried as if Redis were
 * down, never answered fail-open. `code` is the reply's error kind (`ERR`, `CROSSSLOT`, `WRONGTYPE`, ...).
 */
export class StoreReplyError extends TollgateError {
  readonly code: string;
  readonly reply: string;
  constructor(what: string, reply: string, options?: { cause?: unknown }) {
    super(`${what}: Redis answered with an error: ${reply}`, options);
    this.reply = reply;
    this.code = reply.split(" ", 1)[0] ?? "";
  }
}

/**
 * The store lost the state of a hash slot since it was initialised (its epoch key is gone: FLUSHALL, a node
 * replaced empty): the script that found it counted nothing. Redis answered, so this is neither "did not
 * answer" nor a defect; what follows is the policy's `onStoreLoss` (docs/OPERATIONS.md).
 */
export class StoreLostError extends TollgateError {
  /** The epoch key found missing, and its hash slot. */
  readonly epochKey: string;
  readonly slot: number;
  constructor(epochKey: string, slot: number, options?: { cause?: unknown }) {
    super(`the store lost the state of hash slot ${slot} (${epochKey} is gone); nothing was counted`, options);
    this.epochKey = epochKey;
    this.slot = slot;
  }
}

/** A policy or bitmap object that was refused, and why (health reports these). */
export interface RulesRefusal {
  /** The object key (`config/policy.json`, `segments/new.roaring`). */
  key: string;
  reason: string;
  /** When it was refused (ms since the epoch, the rules source's clock). */
  at: number;
}

/**
 * No valid rules were ever loaded in this container (a missing or invalid policy, a refused bitmap, S3
 * unreachable). A server fault, not the message's: the work is retried, never dead-lettered.
 */
export class RulesUnavailableError extends TollgateError {
  readonly refused: readonly RulesRefusal[];
  constructor(refused: readonly RulesRefusal[], options?: { cause?: unknown }) {
    super(
      `no valid rules loaded: ${refused.map(({ key, reason }) => `${key}: ${reason}`).join("; ") || "none yet"}`,
      options,
    );
    this.refused = refused;
  }
}

/** Some delivery messages were not accepted by the delivery queue, even after retries. */
export class DeliveryError extends TollgateError {
  readonly failures: readonly { code: string; message: string; senderFault: boolean }[];
  constructor(
    total: number,
    failures: readonly { code: string; message: string; senderFault: boolean }[],
    options?: { cause?: unknown },
  ) {
    const first = failures[0];
    super(
      `${failures.length} of ${total} delivery messages not accepted${first ? ` (${first.code}: ${first.message})` : ""}`,
      options,
    );
    this.failures = failures;
  }
}

/** The invocation is too close to its timeout to start another record; the record is retried later. */
export class TimeBudgetError extends TollgateError {}

/**
 * Part of a batch was decided and another part failed (its script calls span hash slots: one slot lost or not
 * answering, the others answering). `decided` holds what the calls that answered decided: their allowed sends
 * are counted, so the caller forwards them before it retries the batch for `cause`, the first failure (a
 * retry finds them `duplicate` and forwards them again under the same dedupe ids).
 */
export class PartlyDecidedError<T> extends TollgateError {
  readonly decided: T;
  constructor(decided: T, cause: unknown) {
    super(`part of the batch was decided: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.decided = decided;
  }
}
