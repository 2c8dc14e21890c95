// What the harness and its SDK instance processes say to each other (Node IPC, JSON).
import { hrtime } from "node:process";
import type { LocalCredential } from "../local/sigv4-verify.ts";

export type InstanceTransport = { kind: "redis"; nodes: string[] } | { kind: "http"; url: string };

/** An instance's settings, given as its first argument (JSON). */
export interface InstanceConfig {
  index: number;
  transport: InstanceTransport;
  rule: string;
  key: string;
  /** The reference clock's origin: `process.hrtime.bigint()` of the harness at the run's start, as a string. */
  origin: string;
  syncIntervalMs: number;
  /**
   * How requests reach the SDK: `direct` (default), the instance's own open-loop schedule calling `decide`; or
   * `express`, an Express server with `expressQuotas` on loopback, its load from autocannon in a process of its own.
   */
  front?: "direct" | "express";
  /** express: how the load is paced (express-front.ts; default autocannon's). */
  pacing?: "autocannon" | "poisson";
  /** The tenant it acts as (tenant scenarios); absent: the local tenant, as the local stack's principal. */
  tenant?: InstanceTenant;
}

/** Who an instance is: its tenant's namespace, the key its HTTP syncs sign with, its Redis user. */
export interface InstanceTenant {
  namespace: string;
  credential: LocalCredential;
  redis: { username: string; password: string };
}

/** Harness → instance: offer load from `from` to `to` (reference ms) at `perSecond`, idle in `gaps`. */
export interface StartMessage {
  type: "start";
  from: number;
  to: number;
  perSecond: number;
  seed: number;
  gaps: [number, number][];
}

/** Instance → harness. `allowed` is 1 or 0 per decision time in `at`. */
export type InstanceMessage =
  | { type: "up"; at: number }
  | { type: "ready"; at: number }
  // askedAt: when each request was made, where it waited to be decided (absent: at `at`)
  | { type: "decisions"; at: number[]; allowed: number[]; askedAt?: number[] }
  | { type: "syncs"; at: number; latencyMs: number[]; errors: number; lastError?: string }
  | { type: "done" };

/**
 * The reference clock, ms since `origin`: CLOCK_MONOTONIC, one clock for every process on a Linux machine,
 * which no nemesis touches (libfaketime runs with DONT_FAKE_MONOTONIC=1).
 */
export function referenceClock(origin: bigint): () => number {
  return () => Number(hrtime.bigint() - origin) / 1e6;
}
