// The bench's statistics over samples: a percentile of sorted samples, the median and the mean.

/** The sample at fraction `p` of `sorted` (ascending): the p-th percentile, nearest rank from below. */
export const percentile = (sorted: readonly number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] as number;

/** The median of `values` (sorted in place). */
export const median = (values: number[]) =>
  percentile(
    values.sort((a, b) => a - b),
    0.5,
  );

export const mean = (values: readonly number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;
