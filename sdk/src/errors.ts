// The SDK's errors. A denial is a decision (a value), never an exception: these are for faults and for
// options that cannot work.

export class QuotasError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Options given to `createQuotas` or a transport that cannot work; the message names the field. */
export class QuotasConfigError extends QuotasError {
  readonly path: string;
  constructor(path: string, message: string) {
    super(`${path}: ${message}`);
    this.path = path;
  }
}

/** An argument of a call that cannot work (a cost that is not a whole number ≥ 0); the message names it. */
export class QuotasArgumentError extends QuotasError {
  readonly path: string;
  constructor(path: string, message: string) {
    super(`${path}: ${message}`);
    this.path = path;
  }
}

/** The store did not answer a sync (connection refused, timeout, cluster down): the SDK degrades. */
export class StoreUnreachableError extends QuotasError {}

/** The store or the sync endpoint answered with an error: a bug or a refused request, not an outage. */
export class SyncRejectedError extends QuotasError {
  readonly status: number | undefined;
  constructor(message: string, options?: { cause?: unknown; status?: number }) {
    super(message, options);
    this.status = options?.status;
  }
}

/**
 * The store no longer holds a rule this instance had: removed from the policy, or lost with the store's state
 * (FLUSHALL, a node back empty, a failover that lost writes; the stack restores it from the policy within a
 * minute). Its keys deny (an explicit `fallback: "allow"` allows) until the store answers for it again.
 */
export class QuotaRuleGoneError extends QuotasError {
  readonly rule: string;
  constructor(rule: string) {
    super(`rule ${rule}: the store holds no configuration for it (removed, or the store lost its state): denying`);
    this.rule = rule;
  }
}
