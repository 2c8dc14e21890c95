// Observability hooks. `onMetrics` receives QuotasMetrics after every sync round; on Lambda,
// `emfMetrics(metrics)` turns them into Powertools Metrics (EMF, published by Powertools' logMetrics
// middleware or publishStoredMetrics()); elsewhere pass any plain callback.
import type { Metrics } from "@aws-lambda-powertools/metrics";
import type { QuotasMetrics } from "./round-metrics.ts";

export function emfMetrics(metrics: Pick<Metrics, "addMetric">): (observed: QuotasMetrics) => void {
  return (observed) => {
    if (observed.admitted > 0) metrics.addMetric("QuotasAdmitted", "Count", observed.admitted);
    if (observed.denied > 0) metrics.addMetric("QuotasDenied", "Count", observed.denied);
    for (const ms of observed.syncLatencyMs) metrics.addMetric("QuotasSyncLatency", "Milliseconds", ms);
    if (observed.syncErrors > 0) metrics.addMetric("QuotasSyncErrors", "Count", observed.syncErrors);
    if (observed.allowanceAgeMs >= 0) metrics.addMetric("QuotasAllowanceAge", "Milliseconds", observed.allowanceAgeMs);
    metrics.addMetric("QuotasDegraded", "Milliseconds", observed.degradedMs);
  };
}
