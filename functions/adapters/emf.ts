// CloudWatch Embedded Metric Format: a metric carried by a JSON log line. A rare event's count goes out with
// the log record that tells it: one line, whether or not the function publishes its per-request metrics.

/** The fields that make a JSON log record an EMF document of one count, without dimensions (one alarm). */
export function emfCount(namespace: string, metric: string, value: number, timestamp: number): Record<string, unknown> {
  return {
    _aws: {
      Timestamp: timestamp,
      CloudWatchMetrics: [{ Namespace: namespace, Dimensions: [[]], Metrics: [{ Name: metric, Unit: "Count" }] }],
    },
    [metric]: value,
  };
}
