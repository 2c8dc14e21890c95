// A fleet of real SDK instances (createQuotas, direct transport) against the local cluster, driven in real
// time by the test: every step each instance is offered requests and, every other step, syncs. Each
// admission is recorded on the test's own monotonic clock (the reference), never on an instance's clock, so
// a window is measured as the contract means it whatever an instance's clock says.
import type { Cluster } from "ioredis";
import type { Clock } from "../../src/clock.ts";
import { createQuotas, type Quotas } from "../../src/quotas.ts";
import { redisTransport } from "../../src/transports/redis.ts";
import { neverScheduler } from "./quota-fixtures.ts";

export interface FleetRun {
  /** Reference times (ms, the test's monotonic clock) of every admission. */
  admitted: number[];
  /** The same, per instance. */
  byInstance: number[][];
  /** Errors the instances reported (onError). */
  errors: Error[];
}

export interface FleetOptions {
  cluster: Cluster;
  namespace: string;
  rule: string;
  key: string;
  instances: number;
  durationMs: number;
  /** Requests offered per step to each instance (a step is `stepMs`). */
  perStep: number;
  stepMs?: number;
  /** Instance i's clock offset (ms) at reference time t (ms since the run started). */
  offset?: (instance: number, t: number) => number;
  /**
   * Called once per step before the instances act (a fault: FLUSHALL, a node restarted), with the errors the
   * instances reported so far.
   */
  atStep?: (t: number, errors: readonly Error[]) => Promise<void> | void;
  /** Instances joining later: instance i starts at startAt(i) ms (default 0). */
  startAt?: (instance: number) => number;
}

export async function runFleet(options: FleetOptions): Promise<FleetRun> {
  const stepMs = options.stepMs ?? 25;
  const start = performance.now();
  const elapsed = () => performance.now() - start;
  const errors: Error[] = [];
  const fleet: (Quotas | undefined)[] = Array.from({ length: options.instances }, () => undefined);
  const make = (i: number): Quotas => {
    // the instance's wall clock, offset; its monotonic clock is the process's (a wall-clock step moves
    // neither the reference nor a monotonic clock)
    const clock: Clock = {
      now: () => Date.now() + (options.offset?.(i, elapsed()) ?? 0),
      monotonic: () => performance.now(),
    };
    return createQuotas({
      transport: redisTransport({ redis: options.cluster, namespace: options.namespace }),
      clock,
      scheduler: neverScheduler,
      onError: (error) => errors.push(error),
    });
  };
  const admitted: number[] = [];
  const byInstance: number[][] = fleet.map(() => []);
  let step = 0;
  while (elapsed() < options.durationMs) {
    const t = elapsed();
    await options.atStep?.(t, errors);
    for (let i = 0; i < fleet.length; i++) {
      if (!fleet[i] && t >= (options.startAt?.(i) ?? 0)) fleet[i] = make(i);
    }
    if (step % 2 === 0) await Promise.all(fleet.map((q) => q?.sync().catch(() => {})));
    fleet.forEach((q, i) => {
      for (let r = 0; q && r < options.perStep; r++) {
        if (!q.check(options.rule, options.key).allowed) continue;
        const at = performance.now() - start;
        admitted.push(at);
        byInstance[i]?.push(at);
      }
    });
    step++;
    const next = start + step * stepMs;
    const wait = next - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
  }
  for (const q of fleet) await q?.stop();
  return { admitted, byInstance, errors };
}
