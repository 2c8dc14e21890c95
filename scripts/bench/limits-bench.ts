// The rate limiter's bench section: `Limiter.check` in process against rate-limiter-flexible's `consume`
// on the same cluster in the same run (every algorithm, the same keys, the same concurrency), and the
// sliding log's cost per call at 100,000 entries (Redis time from INFO commandstats, and round trips).
import { Redis } from "ioredis";
import { RateLimiterRedis } from "rate-limiter-flexible";
import { RedisLimitStore, type TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import { Limiter } from "../../functions/core/limits/limiter.ts";
import { fixedClock } from "../../functions/core/shared/clock.ts";
import { limitKey } from "../../functions/core/shared/keys.ts";

const KEYS = 1000;
const IN_FLIGHT = 32;
const ROUND_MS = 2000;
const ROUNDS = 3;

/** Calls per second of `call(i)` with IN_FLIGHT in flight for `ms`. */
async function rate(call: (i: number) => Promise<unknown>, ms: number): Promise<number> {
  let calls = 0;
  const end = Date.now() + ms;
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (Date.now() < end) await call(calls++);
    }),
  );
  return (calls * 1000) / ms;
}

/** Each contender's median over ROUNDS rounds, the contenders interleaved so drift hits all alike. */
async function interleaved(contenders: Record<string, (i: number) => Promise<unknown>>): Promise<Map<string, number>> {
  const samples = new Map<string, number[]>(Object.keys(contenders).map((name) => [name, []]));
  for (const call of Object.values(contenders)) await rate(call, 300); // warm-up
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, call] of Object.entries(contenders)) samples.get(name)?.push(await rate(call, ROUND_MS));
  }
  return new Map(
    [...samples].map(([name, values]) => [name, values.sort((a, b) => a - b)[Math.floor(values.length / 2)] as number]),
  );
}

const n = (value: number) => Math.round(value).toLocaleString("en-US");

export async function runLimitsBench(options: {
  cluster: TollgateCluster;
  primaries: { host: string; port: number }[];
}): Promise<string[]> {
  const { cluster } = options;
  const namespace = `bench-limits-${Date.now()}`;
  const store = new RedisLimitStore(cluster, { deadlineMs: 5_000 });
  const limiter = new Limiter({ store, namespace });
  const rlf = new RateLimiterRedis({ storeClient: cluster, keyPrefix: namespace, points: 1_000_000_000, duration: 60 });
  const specs = {
    "fixed-window": { algorithm: "fixed-window", max: 1_000_000_000, windowMs: 60_000 },
    "token-bucket": { algorithm: "token-bucket", max: 1_000_000_000, refillAmount: 1, refillEveryMs: 1000 },
    "sliding-window": { algorithm: "sliding-window", max: 1_000_000_000, windowMs: 60_000 },
    "sliding-log": { algorithm: "sliding-log", max: 100_000, windowMs: 1000 },
    gcra: { algorithm: "gcra", burst: 1_000_000, count: 1000, periodMs: 1000 },
  } as const;
  const contenders: Record<string, (i: number) => Promise<unknown>> = {
    "rate-limiter-flexible": (i) => rlf.consume(`k${i % KEYS}`),
  };
  for (const [name, spec] of Object.entries(specs)) {
    contenders[name] = (i) => limiter.check({ ...spec, key: `k${i % KEYS}` });
  }
  const rates = await interleaved(contenders);
  const peer = rates.get("rate-limiter-flexible") as number;
  const log = await slidingLogCost(options);
  return [
    `Measured ${new Date().toISOString().slice(0, 10)} by \`npm run bench\` (BENCH_ONLY=limits for this section alone): ${IN_FLIGHT} calls in flight from one Node process over ${KEYS} keys, the contenders interleaved, ${ROUNDS} rounds of ${ROUND_MS / 1000} s each, the median shown; every call allowed.`,
    "",
    "| In process, same cluster, same run | Calls/s | vs `RateLimiterRedis.consume` |",
    "|---|---|---|",
    `| rate-limiter-flexible \`RateLimiterRedis.consume\` (its increment script) | ${n(peer)} | 1.00× |`,
    ...Object.keys(specs).map((name) => {
      const value = rates.get(name) as number;
      return `| \`Limiter.check\` ${name} (validation, its script, result) | ${n(value)} | ${(value / peer).toFixed(2)}× |`;
    }),
    "",
    "The sliding log, one key (window 100 s, max 100,000), Redis time per call from `INFO commandstats` (EVALSHA on the key's primary) and the round trip of sequential calls:",
    "",
    "| Sliding log call | Entries in the log | Redis time per call | Round trip p50 |",
    "|---|---|---|---|",
    ...log,
  ];
}

/** Per-call cost of the sliding log at a small and at a full 100,000-entry log. */
async function slidingLogCost(options: {
  cluster: TollgateCluster;
  primaries: { host: string; port: number }[];
}): Promise<string[]> {
  const { cluster } = options;
  const namespace = `bench-log-${Date.now()}`;
  const WINDOW = 100_000;
  // request times ahead of the clock by a day: the states outlive the bench
  const start = Date.now() + 86_400_000;
  const clock = fixedClock(start);
  const limiter = new Limiter({ store: new RedisLimitStore(cluster, { deadlineMs: 30_000 }), clock, namespace });
  const spec = { algorithm: "sliding-log", max: 100_000, windowMs: WINDOW } as const;
  const key = (name: string) => limitKey(namespace, "sliding-log", name);
  const rows: string[] = [];
  const measure = async (label: string, name: string, at: (i: number) => number, cost = 1) => {
    const entries = Math.max(0, (await cluster.llen(key(name))) - 1);
    const primary = await primaryOf(cluster, key(name), options.primaries);
    await primary.config("RESETSTAT");
    const samples: number[] = [];
    for (let i = 0; i < 1000; i++) {
      const started = performance.now();
      await limiter.check({ ...spec, key: name, cost, at: at(i) });
      samples.push(performance.now() - started);
    }
    const stats = await primary.info("commandstats");
    primary.disconnect();
    const usec = Number(/cmdstat_evalsha:calls=\d+,usec=\d+,usec_per_call=([\d.]+)/.exec(stats)?.[1] ?? Number.NaN);
    samples.sort((a, b) => a - b);
    rows.push(
      `| ${label} | ${entries.toLocaleString("en-US")} | ${(usec / 1000).toFixed(3)} ms | ${(samples[500] as number).toFixed(3)} ms |`,
    );
  };
  // a short log: 100 entries
  for (let i = 0; i < 100; i++) await limiter.check({ ...spec, key: "short", at: start + i });
  await measure("allowed, window sliding by 1 ms a call", "short", (i) => start + 100 + i);
  // a full log: one entry per ms for a whole window, written 2,000 calls at a time
  for (let from = 0; from < WINDOW - 1000; from += 2000) {
    await Promise.all(
      Array.from({ length: Math.min(2000, WINDOW - 1000 - from) }, (_, i) =>
        limiter.check({ ...spec, key: "full", at: start + from + i }),
      ),
    );
  }
  // each call ages out one entry and adds one: the log stays at ~99,000 entries
  await measure("allowed, window sliding by 1 ms a call", "full", (i) => start + WINDOW + i);
  await measure(
    "denied (full: the retry time is read from the oldest entries)",
    "full",
    () => start + WINDOW + 999,
    2_000,
  );
  await measure("allowed, 1,000 charges in the same ms", "full", () => start + WINDOW + 1000);
  return rows;
}

/** A direct connection to the primary that owns `key` (for its commandstats). */
async function primaryOf(
  cluster: TollgateCluster,
  key: string,
  primaries: { host: string; port: number }[],
): Promise<Redis> {
  const slot = (await cluster.cluster("KEYSLOT", key)) as number;
  const shards = await cluster.cluster("SLOTS");
  const owner = shards.find(([from, to]) => slot >= from && slot <= to)?.[2];
  const node = primaries.find((p) => p.port === owner?.[1]) ?? primaries[0];
  return new Redis({ host: node?.host, port: node?.port, lazyConnect: false });
}
