// How the bench times calls: a closed loop with a fixed number in flight, sequential latencies after a
// warm-up, and several loops taking turns so that load from outside the run falls on all of them alike.
import { mean, percentile } from "./statistics.ts";

export interface Throughput {
  /** Calls per second. */
  rps: number;
  /** This process's CPU time per call, µs (user + system). */
  cpuUs: number;
}

/** Calls per second of `call(i)` (i counts the calls) with `inFlight` in flight for `ms`, and the CPU per call. */
export async function closedLoop(
  call: (i: number) => Promise<unknown>,
  options: { ms: number; inFlight: number },
): Promise<Throughput> {
  let calls = 0;
  const end = Date.now() + options.ms;
  const cpuBefore = process.cpuUsage();
  await Promise.all(
    Array.from({ length: options.inFlight }, async () => {
      while (Date.now() < end) await call(calls++);
    }),
  );
  const cpu = process.cpuUsage(cpuBefore);
  return { rps: (calls * 1000) / options.ms, cpuUs: (cpu.user + cpu.system) / calls };
}

/** p50 and p99 of `runs` sequential calls of `call(i)`, in ms, after 200 warm-up calls (i < 0). */
export async function latencies(
  runs: number,
  call: (i: number) => Promise<unknown>,
): Promise<{ p50: number; p99: number }> {
  for (let i = 0; i < 200; i++) await call(-1 - i);
  const samples: number[] = [];
  for (let i = 0; i < runs; i++) {
    const started = performance.now();
    await call(i);
    samples.push(performance.now() - started);
  }
  samples.sort((a, b) => a - b);
  return { p50: percentile(samples, 0.5), p99: percentile(samples, 0.99) };
}

/** A closed loop of each call in turn (32 in flight), 1 s at a time for 5 rounds: the mean and each round's rate. */
export async function inTurns<K extends string>(
  calls: Record<K, () => Promise<unknown>>,
): Promise<Record<K, Throughput & { rates: number[] }>> {
  const names = Object.keys(calls) as K[];
  const runs = new Map<K, Throughput[]>(names.map((name) => [name, []]));
  for (let round = 0; round < 5; round++)
    for (const name of names) runs.get(name)?.push(await closedLoop(calls[name], { ms: 1000, inFlight: 32 }));
  return Object.fromEntries(
    names.map((name) => {
      const measured = runs.get(name) ?? [];
      return [
        name,
        {
          rps: mean(measured.map((m) => m.rps)),
          cpuUs: mean(measured.map((m) => m.cpuUs)),
          rates: measured.map((m) => m.rps),
        },
      ];
    }),
  ) as Record<K, Throughput & { rates: number[] }>;
}

/** Resolves after `ms` (at once when `ms` is not positive). */
export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
