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
    super(source, "not a valid portable roaring bitmap (CRoaring portable serialization)", options);
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

/** An object the store does not hold (a missing bitmap or policy). */
export class ObjectNotFoundError extends TollgateError {
  readonly key: string;
  constructor(key: string, options?: { cause?: unknown }) {
    super(`object not found: ${key}`, options);
    this.key = key;
  }
}

/** The counter store (Redis) could not answer in time; nothing was decided for the affected users. */
export class StoreUnavailableError extends TollgateError {}

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
