// What one sync round reports to `onMetrics`: the counters since the previous report (reset here) and the
// gauges now, read from the engine's state.
import type { QuotaEngine } from "./engine.ts";

/** What the SDK observed since the previous report (counters) and now (gauges). */
export interface QuotasMetrics {
  admitted: number;
  denied: number;
  /** Round-trip time of each sync call in this round, ms. */
  syncLatencyMs: number[];
  /** Age of the oldest allowance in use, ms (-1: none). */
  allowanceAgeMs: number;
  /** How long the longest-unreachable slot group has been unreachable, ms (0: all reachable). */
  degradedMs: number;
  /** Sync calls that failed in this round (unreachable or rejected). */
  syncErrors: number;
}

/** The round's metrics; resets the engine's admitted and denied counters. */
export function roundMetrics(engine: QuotaEngine, now: number, latencies: number[], errors: number): QuotasMetrics {
  let oldest = Number.POSITIVE_INFINITY;
  let degradedMs = 0;
  for (const rule of engine.allRules()) {
    for (const group of rule.groups) {
      if (group.unreachableSince >= 0) degradedMs = Math.max(degradedMs, now - group.unreachableSince);
      for (const handle of group.handles) if (handle.assignedAt >= 0) oldest = Math.min(oldest, handle.assignedAt);
    }
  }
  const metrics: QuotasMetrics = {
    admitted: engine.admittedCount,
    denied: engine.deniedCount,
    syncLatencyMs: latencies,
    allowanceAgeMs: Number.isFinite(oldest) ? now - oldest : -1,
    degradedMs,
    syncErrors: errors,
  };
  engine.admittedCount = 0;
  engine.deniedCount = 0;
  return metrics;
}
