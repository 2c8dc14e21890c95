// The axes of the chaos grid.
export const TRANSPORTS = ["redis", "http"] as const;
export type Transport = (typeof TRANSPORTS)[number];
export const MODES = ["strict", "approximate"] as const;
export type Mode = (typeof MODES)[number];
