// The rate limiter: one limit (its algorithm's own script) or several of one scope checked and charged
// all-or-nothing in one atomic call of lua/limits.lua. Requests are validated here, once.

import { DEFAULT_NAMESPACE, limitKey, scopedLimitKey, tenantNamespace } from "../../../sdk/src/protocol/index.ts";
import { type Clock, decisionTimeAt, systemClock } from "../shared/clock.ts";
import { ValidationError } from "../shared/errors.ts";
import { checkNamespace } from "../shared/namespace.ts";
import { parseOrThrow } from "../shared/validation.ts";
import { decodeLimitReply, type LimitStore, limitArgs } from "./limit-script.ts";
import {
  type Algorithm,
  capacity,
  type LimitRequest,
  type LimitResult,
  type LimitSpec,
  limitRequestSchemaFor,
  limitsRequestSchema,
  MAX_PAST_MS,
} from "./limit-specs.ts";
import { decodeLimitsReply, limitsArgs } from "./limits-script.ts";
import { ValidSpecs } from "./valid-specs.ts";

declare const validated: unique symbol;
/** A POST /v1/limit request that passed `Limiter.validate` (only that makes one). */
export type ValidLimitRequest = LimitRequest & { readonly [validated]: true };

export interface LimiterOptions {
  store: LimitStore;
  clock?: Clock;
  namespace?: string;
}

export class Limiter {
  private readonly store: LimitStore;
  private readonly clock: Clock;
  private readonly namespace: string;
  private readonly validSpecs = new ValidSpecs();
  /** Each tenant's key namespace, built once (tenantNamespace checks both names). */
  private readonly tenantNamespaces = new Map<string, string>();

  constructor(options: LimiterOptions) {
    this.store = options.store;
    this.clock = options.clock ?? systemClock;
    this.namespace = checkNamespace(options.namespace ?? DEFAULT_NAMESPACE);
  }

  /** One limit (POST /v1/limit): validate, then decide. */
  check(request: unknown, tenant?: string): Promise<LimitResult & { algorithm: Algorithm }> {
    // not async, no spread: the promise layer and the copy cost more than the limiter's own work
    let valid: ValidLimitRequest;
    try {
      valid = this.validate(request);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.decide(valid, tenant).then((result) => {
      const named = result as LimitResult & { algorithm: Algorithm };
      named.algorithm = valid.algorithm;
      return named;
    });
  }

  /**
   * A POST /v1/limit request, validated strictly (ValidationError naming the field), with its cost in
   * bounds and its `at` within the clock's range. What `decide` takes; apart so that a caller (the
   * negative cache) can look at a valid request before it costs a Redis call. A request whose fields other
   * than `key` and `at` were validated before is checked for those two only (valid-specs.ts).
   */
  validate(request: unknown): ValidLimitRequest {
    const known = this.validSpecs.lookup(request);
    if (known) return known as ValidLimitRequest;
    const parsed = parseOrThrow(limitRequestSchemaFor(request), request);
    chargeOf(parsed, parsed.cost, "cost");
    this.validSpecs.remember(request, parsed);
    return parsed as ValidLimitRequest;
  }

  /**
   * The namespace of `tenant`'s keys (docs/tenants.md); without one, the deployment's own (the limiter used
   * as a library; the check API always names the caller's tenant).
   */
  private namespaceOf(tenant: string | undefined): string {
    if (tenant === undefined) return this.namespace;
    let scoped = this.tenantNamespaces.get(tenant);
    if (scoped === undefined) {
      scoped = tenantNamespace(this.namespace, tenant);
      this.tenantNamespaces.set(tenant, scoped);
    }
    return scoped;
  }

  /** Charges and decides one validated limit in its algorithm's script, in `tenant`'s namespace. */
  decide(request: ValidLimitRequest, tenant?: string): Promise<LimitResult> {
    // one reading: it validates `at` and counts the state's lifetime
    const clock = this.clock.now();
    let now: number;
    let key: string;
    try {
      now = decisionTimeAt(request.at, clock, MAX_PAST_MS);
      key = limitKey(this.namespaceOf(tenant), request.algorithm, request.key);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.store
      .runLimit(request.algorithm, key, limitArgs(now, request, request.cost ?? 1, clock))
      .then(decodeLimitReply);
  }

  /**
   * Several limits, all charged or none (POST /v1/limits), in `tenant`'s namespace; the keys share the
   * scope's hash slot.
   */
  async checkAll(
    request: unknown,
    tenant?: string,
  ): Promise<{ allowed: boolean; results: (LimitResult & { key: string; algorithm: Algorithm })[] }> {
    const parsed = parseOrThrow(limitsRequestSchema, request);
    const costs = parsed.limits.map((spec, i) =>
      spec.cost === undefined ? chargeOf(spec, parsed.cost, "cost") : chargeOf(spec, spec.cost, `limits[${i}].cost`),
    );
    const clock = this.clock.now();
    const now = decisionTimeAt(parsed.at, clock, MAX_PAST_MS);
    const namespace = this.namespaceOf(tenant);
    const keys = parsed.limits.map((spec) => scopedLimitKey(namespace, parsed.scope, spec.algorithm, spec.key));
    const reply = await this.store.runLimits(keys, limitsArgs(now, parsed.limits, costs, clock));
    const results = decodeLimitsReply(reply, parsed.limits.length);
    return {
      allowed: results.every((r) => r.allowed),
      results: results.map((r, i) => {
        const { key, algorithm } = parsed.limits[i] as LimitSpec;
        return { ...r, key, algorithm };
      }),
    };
  }
}

/** The cost to charge (default 1); more than the limit could ever allow is a client error. */
function chargeOf(spec: LimitSpec, cost: number | undefined, path: string): number {
  const charge = cost ?? 1;
  if (charge > capacity(spec)) {
    throw new ValidationError(path, `cost ${charge} is more than this limit can ever allow (${capacity(spec)})`);
  }
  return charge;
}
