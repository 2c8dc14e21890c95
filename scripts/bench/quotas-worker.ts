// One worker thread of the Quotas bench: a few simulated client instances (SDK or Grab-style), each offered
// open-loop Poisson load on one shared key, every decision timestamped. Not a test: it measures.

import { readFileSync } from "node:fs";
import { parentPort, workerData } from "node:worker_threads";
import { Cluster } from "ioredis";
import { createQuotas, type Quotas, type QuotaTransport } from "../../sdk/src/index.ts";
import { redisTransport } from "../../sdk/src/transports/redis.ts";

export interface WorkerInput {
  ports: number[];
  namespace: string;
  design: "sdk" | "grab";
  /** Per instance: its offered rate, requests/s. */
  rates: number[];
  /** Each instance's index in the whole fleet (instances are dealt to the threads in turn). */
  instanceIds: number[];
  durationMs: number;
  syncIntervalMs: number;
  /** Grab: the key's limit per window, and the window. */
  max: number;
  windowMs: number;
  /** Record when each instance first holds this config version (the operator-change run). */
  watchVersion?: string;
}

export interface WorkerOutput {
  /** Decision times (ms since the epoch, fractional) of admissions, and of denials with their instance. */
  admitted: Float64Array;
  admittedBy: Int32Array;
  denied: Float64Array;
  deniedBy: Int32Array;
  offered: number;
  syncCalls: number;
  syncEntries: number;
  /** Per instance: when it first held `watchVersion` (-1: never). */
  versionSeenAt: number[];
  /**
   * With BENCH_QUOTAS_TRACE only: every sync call, flat [instance, sentAt, repliedAt, offered, amount,
   * denyUntil (local ms, 0: none), used in the window, ...].
   */
  syncs?: number[];
}

const input = workerData as WorkerInput;
const KEY = "shared";
const RULE = "api";
const now = () => performance.timeOrigin + performance.now();

class Recorder {
  private data = new Float64Array(1 << 16);
  private by = new Int32Array(1 << 16);
  length = 0;
  push(at: number, instance: number): void {
    if (this.length === this.data.length) {
      const data = new Float64Array(this.data.length * 2);
      data.set(this.data);
      this.data = data;
      const by = new Int32Array(this.by.length * 2);
      by.set(this.by);
      this.by = by;
    }
    this.data[this.length] = at;
    this.by[this.length++] = instance;
  }
  times(): Float64Array {
    return this.data.slice(0, this.length);
  }
  instances(): Int32Array {
    return this.by.slice(0, this.length);
  }
}

/** Grab's design: usage flushed every F; the verdict the store derives reaches the instance a hop later. */
class GrabInstance {
  private pending = 0;
  private verdict = true;
  private nextVerdict = true;
  private timer: NodeJS.Timeout | undefined;
  calls = 0;
  errors = 0;
  constructor(
    private readonly redis: Cluster & { grabFlush?: (key: string, ...args: number[]) => Promise<number> },
    private readonly key: string,
  ) {}
  check(): boolean {
    if (!this.verdict) return false;
    this.pending++;
    return true;
  }
  start(): void {
    const tick = () => {
      const count = this.pending;
      this.pending = 0;
      this.calls++;
      this.redis.grabFlush!(this.key, now(), count, input.windowMs, 50).then(
        (sum) => {
          // Grab's three hops (flush, aggregate, poll): the verdict in force is the previous one
          this.verdict = this.nextVerdict;
          this.nextVerdict = sum < input.max;
        },
        () => {
          this.errors++;
        },
      );
      this.timer = setTimeout(tick, jittered(input.syncIntervalMs));
    };
    this.timer = setTimeout(tick, jittered(input.syncIntervalMs));
  }
  stop(): void {
    clearTimeout(this.timer);
  }
}

function jittered(ms: number): number {
  return ms * (0.8 + 0.4 * Math.random());
}

function counting(
  transport: QuotaTransport,
  counts: { calls: number; entries: number },
  trace?: { ids: Map<string, number>; syncs: number[] },
): QuotaTransport {
  return {
    sync(request, at) {
      counts.calls++;
      counts.entries += request.entries.length;
      const reply = transport.sync(request, at);
      if (!trace) return reply;
      const sentAt = now();
      return reply.then((r) => {
        const e = r.entries[0];
        const denyUntil = e && e.denyUntil > r.serverTime ? sentAt + (e.denyUntil - r.serverTime) : 0;
        const amount = e ? (e.mode === "approximate" ? e.allowance : e.tokens) : -1;
        trace.syncs.push(
          trace.ids.get(request.instanceId) ?? -1,
          sentAt,
          now(),
          request.entries[0]?.offered ?? 0,
          amount,
          denyUntil,
          e?.used[0] ?? -1,
        );
        return r;
      });
    },
  };
}

async function main(): Promise<void> {
  const redis = new Cluster(
    input.ports.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })),
    { enableAutoPipelining: true, redisOptions: { commandTimeout: 1_000, maxRetriesPerRequest: 1 } },
  );
  redis.on("error", () => {});
  redis.defineCommand("grabFlush", {
    numberOfKeys: 1,
    lua: readFileSync(new URL("./grab-quotas.lua", import.meta.url), "utf8"),
  });
  const counts = { calls: 0, entries: 0 };
  const trace = process.env.BENCH_QUOTAS_TRACE ? { ids: new Map<string, number>(), syncs: [] as number[] } : undefined;
  const transport = counting(redisTransport({ redis, namespace: input.namespace }), counts, trace);
  const sdk: Quotas[] = [];
  const grab: GrabInstance[] = [];
  for (let i = 0; i < input.rates.length; i++) {
    if (input.design === "sdk") {
      const quotas = createQuotas({ transport, syncIntervalMs: input.syncIntervalMs });
      trace?.ids.set(quotas.instanceId, input.instanceIds[i] as number);
      quotas.resolve(RULE, KEY);
      sdk.push(quotas);
    } else {
      grab.push(new GrabInstance(redis as never, `${input.namespace}:grab:{${KEY}}`));
    }
  }
  // every instance holds an allowance (or a verdict) before the load starts; the main thread then gives
  // every worker the same start time (a loaded machine starts threads slowly)
  await Promise.all(sdk.map((q) => q.sync()));
  const handles = sdk.map((q) => q.resolve(RULE, KEY));
  const startAt = await new Promise<number>((resolve) => {
    parentPort!.once("message", (message: { startAt: number }) => resolve(message.startAt));
    parentPort!.postMessage({ ready: true });
  });
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, startAt - now())));
  for (const q of sdk) q.start();
  for (const g of grab) g.start();

  const admitted = new Recorder();
  const denied = new Recorder();
  const versionSeenAt = input.rates.map(() => -1);
  const next = input.rates.map(() => startAt);
  const gap = (rate: number) => (-Math.log(1 - Math.random()) * 1_000) / rate;
  for (let i = 0; i < next.length; i++) next[i] = (next[i] as number) + gap(input.rates[i] as number);
  const end = startAt + input.durationMs;
  let offered = 0;
  await new Promise<void>((done) => {
    const tick = () => {
      const t = now();
      for (let i = 0; i < next.length; i++) {
        const rate = input.rates[i] as number;
        while ((next[i] as number) <= t && (next[i] as number) < end) {
          offered++;
          const allowed = input.design === "sdk" ? sdk[i]!.checkHandle(handles[i]!).allowed : grab[i]!.check();
          if (allowed) admitted.push(t, input.instanceIds[i] as number);
          else denied.push(t, input.instanceIds[i] as number);
          next[i] = (next[i] as number) + gap(rate);
        }
        if (
          input.watchVersion &&
          versionSeenAt[i] === -1 &&
          sdk[i]?.engine.rule(RULE)?.configVersion === input.watchVersion
        ) {
          versionSeenAt[i] = t;
        }
      }
      if (t >= end) return done();
      setTimeout(tick, 1);
    };
    tick();
  });
  for (const g of grab) g.stop();
  await Promise.all(sdk.map((q) => q.stop()));
  for (const g of grab) counts.calls += g.calls;
  if (grab.some((g) => g.errors > 0)) console.error(`grab flush errors: ${grab.map((g) => g.errors)}`);
  await redis.quit();
  const output: WorkerOutput = {
    admitted: admitted.times(),
    admittedBy: admitted.instances(),
    denied: denied.times(),
    deniedBy: denied.instances(),
    offered,
    syncCalls: counts.calls,
    syncEntries: counts.entries,
    versionSeenAt,
    ...(trace ? { syncs: trace.syncs } : {}),
  };
  parentPort!.postMessage(output);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
