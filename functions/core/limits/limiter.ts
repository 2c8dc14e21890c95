// The rate limiter: one limit or several checked and charged all-or-nothing in one atomic call of
// lua/limits.lua (which runs lua/<algorithm>.lua for each limit).
import { type Clock, decisionTime, systemClock } from "../shared/clock.ts";
import { ValidationError } from "../shared/errors.ts";
import { checkNamespace, DEFAULT_NAMESPACE, limitKey } from "../shared/keys.ts";
import { parseOrThrow } from "../shared/validation.ts";
import {
  type Algorithm,
  capacity,
  type LimitResult,
  type LimitSpec,
  limitRequestSchema,
  limitsRequestSchema,
} from "./limit-specs.ts";
import { decodeLimitsReply, type LimitStore, limitsArgs } from "./limits-script.ts";

export interface LimiterOptions {
  store: LimitStore;
  clock?: Clock;
  namespace?: string;
}

export class Limiter {
  private readonly store: LimitStore;
  private readonly clock: Clock;
  private readonly namespace: string;

  constructor(options: LimiterOptions) {
    this.store = options.store;
    this.clock = options.clock ?? systemClock;
    this.namespace = checkNamespace(options.namespace ?? DEFAULT_NAMESPACE);
  }

  /** One limit (POST /v1/limit). */
  async check(request: unknown): Promise<LimitResult & { algorithm: Algorithm }> {
    const parsed = parseOrThrow(limitRequestSchema, request);
    const [result] = await this.run(parsed.key, [parsed], parsed.cost ?? 1, parsed.at, "");
    // one limit: its own verdict is the request's
    return { ...(result as LimitResult), algorithm: parsed.algorithm };
  }

  /** Several limits, all charged or none (POST /v1/limits); the keys share the scope's hash slot. */
  async checkAll(
    request: unknown,
  ): Promise<{ allowed: boolean; results: (LimitResult & { key: string; algorithm: Algorithm })[] }> {
    const parsed = parseOrThrow(limitsRequestSchema, request);
    const results = await this.run(parsed.scope, parsed.limits, parsed.cost ?? 1, parsed.at, "limits");
    return {
      allowed: results.every((r) => r.allowed),
      results: results.map((r, i) => ({
        ...r,
        key: (parsed.limits[i] as LimitSpec).key,
        algorithm: (parsed.limits[i] as LimitSpec).algorithm,
      })),
    };
  }

  private async run(
    tag: string,
    specs: readonly LimitSpec[],
    charge: number,
    at: number | undefined,
    root: string,
  ): Promise<LimitResult[]> {
    specs.forEach((spec, i) => {
      if (charge > capacity(spec)) {
        const path = root ? `${root}[${i}]` : "cost";
        throw new ValidationError(path, `cost ${charge} is more than this limit can ever allow (${capacity(spec)})`);
      }
    });
    const now = decisionTime(at, this.clock);
    const keys = specs.map((spec) => limitKey(this.namespace, tag, spec.algorithm, spec.key));
    const reply = await this.store.runLimits(keys, limitsArgs(now, specs, charge));
    return decodeLimitsReply(reply, specs.length);
  }
}
