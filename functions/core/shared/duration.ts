// Rolling window lengths as policies write them: `Ns`, `Nm`, `Nh`, `Nd`.

const UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
const PATTERN = /^([1-9][0-9]{0,6})([smhd])$/;

export const MIN_WINDOW_MS = 1_000;
export const MAX_WINDOW_MS = 30 * UNIT_MS.d;

/** Milliseconds of a window like "7d", or undefined when it is not of that form. */
export function parseDuration(text: string): number | undefined {
  const match = PATTERN.exec(text);
  if (!match) return undefined;
  return Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS];
}
