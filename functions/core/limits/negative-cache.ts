// A small in-container cache of denials: a request that was just denied is denied again, without a Redis
// call, until it could pass (its retryAfter). Only exact repeats hit it (same limit, parameters and cost),
// never peeks, client timestamps or strict token buckets (whose denials change state).
import type { Clock } from "../shared/clock.ts";
import { parameterValues } from "./limit-script.ts";
import type { LimitRequest, LimitResult } from "./limit-specs.ts";

export class NegativeCache {
  private readonly entries = new Map<string, { until: number; result: LimitResult }>();

  constructor(
    private readonly clock: Clock,
    private readonly maxEntries = 10_000,
  ) {}

  /** Denials held (expired ones included until a lookup or an insertion drops them). */
  get size(): number {
    return this.entries.size;
  }

  /** The cached denial for this request, with remaining time recomputed, or undefined. */
  get(identity: string): LimitResult | undefined {
    const entry = this.entries.get(identity);
    if (!entry) return undefined;
    const now = this.clock.now();
    if (now >= entry.until) {
      this.entries.delete(identity);
      return undefined;
    }
    return { ...entry.result, retryAfterMs: entry.until - now };
  }

  remember(identity: string, result: LimitResult): void {
    if (result.allowed || result.retryAfterMs === undefined) return;
    if (this.entries.size >= this.maxEntries) {
      // drop the oldest insertion: a Map iterates in insertion order
      const oldest = this.entries.keys().next().value;
      if (oldest !== undefined) this.entries.delete(oldest);
    }
    this.entries.set(identity, { until: this.clock.now() + result.retryAfterMs, result });
  }
}

/**
 * Which requests may be answered from the cache, and under what identity: the algorithm, cost and
 * parameters as the script takes them, then the key (last, so no key text can imitate another identity).
 * Built from the validated request, so two bodies that differ only in member order share an identity.
 */
export function cacheIdentity(request: LimitRequest): string | undefined {
  if (request.at !== undefined || request.cost === 0 || (request.algorithm === "token-bucket" && request.strict)) {
    return undefined;
  }
  return `${request.algorithm} ${request.cost ?? 1} ${parameterValues(request).join(" ")} ${request.key}`;
}
