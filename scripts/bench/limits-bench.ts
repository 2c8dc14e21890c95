// The rate limiter's bench section: `Limiter.check` in process against rate-limiter-flexible's `consume`
// on the same cluster in the same run (every algorithm, the same keys, the same concurrency), and the
// sliding log's cost per call at 100,000 entries (Redis time from INFO commandstats, and round trips).
import { loadavg } from "node:os";
import { Cluster, Redis } from "ioredis";
import { RateLimiterRedis } from "rate-limiter-flexible";
import { createRedisCluster, RedisLimitStore, type TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import { Limiter } from "../../functions/core/limits/limiter.ts";
import { fixedClock } from "../../functions/core/shared/clock.ts";
import { limitKey } from "../../sdk/src/protocol/index.ts";
import { primaryPortOf, scriptTime } from "./redis-stats.ts";
import { median } from "./statistics.ts";
import { n, today } from "./tables.ts";
import { closedLoop } from "./timing.ts";

const KEYS = 1000;
const IN_FLIGHT = 32;
const ROUND_MS = 2000;
const ROUNDS = 3;

interface Sample {
  /** Calls per second. */
  rate: number;
  /** This process's CPU time per call, µs (user + system). */
  cpuUs: number;
  /** Redis' own time per script call on the primaries, µs (INFO commandstats: EVALSHA, EVAL and FCALL). */
  redisUs: number;
}

/** Calls per second of `call(i)` with IN_FLIGHT in flight for `ms`, the CPU per call and Redis' time per script call. */
async function rate(call: (i: number) => Promise<unknown>, ms: number, primaries: Redis[]): Promise<Sample> {
  await Promise.all(primaries.map((node) => node.config("RESETSTAT")));
  const { rps, cpuUs } = await closedLoop(call, { ms, inFlight: IN_FLIGHT });
  // Redis' time per script call since the RESETSTAT: the script's own cost, which the machine's load moves
  // far less than calls/s (rate-limiter-flexible's script is an EVALSHA, ours FCALL)
  const { calls, micros } = await scriptTime(primaries);
  return { rate: rps, cpuUs, redisUs: micros / calls };
}

/** Each contender's median rate and CPU over ROUNDS rounds, the contenders interleaved so drift hits all alike. */
async function interleaved(
  contenders: Record<string, (i: number) => Promise<unknown>>,
  primaries: Redis[],
): Promise<Map<string, Sample & { rates: number[] }>> {
  const samples = new Map<string, Sample[]>(Object.keys(contenders).map((name) => [name, []]));
  for (const call of Object.values(contenders)) await rate(call, 300, primaries); // warm-up
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, call] of Object.entries(contenders))
      samples.get(name)?.push(await rate(call, ROUND_MS, primaries));
  }
  return new Map(
    [...samples].map(([name, values]) => [
      name,
      {
        rate: median(values.map((v) => v.rate)),
        cpuUs: median(values.map((v) => v.cpuUs)),
        redisUs: median(values.map((v) => v.redisUs)),
        rates: values.map((v) => v.rate),
      },
    ]),
  );
}

export async function runLimitsBench(options: {
  cluster: TollgateCluster;
  primaries: { host: string; port: number }[];
}): Promise<string[]> {
  const namespace = `bench-limits-${Date.now()}`;
  // Limiter.check on the check API's own client (no autopipelining: one command per call)
  const ours = createRedisCluster({ nodes: options.primaries, commandTimeoutMs: 30_000, autoPipelining: false });
  // rate-limiter-flexible on plain ioredis clients of its own, as its users run it: the library's
  // defaults, and with autopipelining; the faster of the two is the baseline
  const plain = new Cluster(options.primaries);
  const pipelined = new Cluster(options.primaries, { enableAutoPipelining: true });
  try {
    await Promise.all(
      [ours, plain, pipelined].map((client) => Promise.all(client.nodes("master").map((node) => node.ping()))),
    );
    return await compare(namespace, ours, plain, pipelined, options);
  } finally {
    ours.disconnect();
    plain.disconnect();
    pipelined.disconnect();
  }
}

async function compare(
  namespace: string,
  ours: TollgateCluster,
  plain: Cluster,
  pipelined: Cluster,
  options: { cluster: TollgateCluster; primaries: { host: string; port: number }[] },
): Promise<string[]> {
  const store = new RedisLimitStore(ours, { deadlineMs: 5_000 });
  const limiter = new Limiter({ store, namespace });
  const rlfOn = (client: Cluster) =>
    new RateLimiterRedis({ storeClient: client, keyPrefix: namespace, points: 1_000_000_000, duration: 60 });
  const rlfPlain = rlfOn(plain);
  const rlfPipelined = rlfOn(pipelined);
  // Each request is an object literal, as a caller writes it (rate-limiter-flexible's side builds its key
  // string): spreading a shared spec into a new object per call (the bench did, before) cost the caller
  // several µs per call, counted against the limiter.
  const specs: Record<string, (key: string) => object> = {
    "fixed-window": (key) => ({ algorithm: "fixed-window", max: 1_000_000_000, windowMs: 60_000, key }),
    "token-bucket": (key) => ({
      algorithm: "token-bucket",
      max: 1_000_000_000,
      refillAmount: 1,
      refillEveryMs: 1000,
      key,
    }),
    "sliding-window": (key) => ({ algorithm: "sliding-window", max: 1_000_000_000, windowMs: 60_000, key }),
    "sliding-log": (key) => ({ algorithm: "sliding-log", max: 100_000, windowMs: 1000, key }),
    gcra: (key) => ({ algorithm: "gcra", burst: 1_000_000, count: 1000, periodMs: 1000, key }),
  };
  const contenders: Record<string, (i: number) => Promise<unknown>> = {
    "rlf-plain": (i) => rlfPlain.consume(`k${i % KEYS}`),
    "rlf-pipelined": (i) => rlfPipelined.consume(`k${i % KEYS}`),
  };
  for (const [name, request] of Object.entries(specs)) {
    contenders[name] = (i) => limiter.check(request(`k${i % KEYS}`));
  }
  // direct connections to the primaries, for their commandstats
  const primaries = options.primaries.map(({ host, port }) => new Redis({ host, port }));
  const results = await interleaved(contenders, primaries).finally(() => {
    for (const node of primaries) node.disconnect();
  });
  const get = (name: string) => results.get(name) as Sample & { rates: number[] };
  const baselineName = get("rlf-plain").rate >= get("rlf-pipelined").rate ? "rlf-plain" : "rlf-pipelined";
  const peer = get(baselineName);
  // by CPU, against whichever of rate-limiter-flexible's two clients spent less per call
  const peerCpuUs = Math.min(get("rlf-plain").cpuUs, get("rlf-pipelined").cpuUs);
  const log = await slidingLogCost(options);
  const ratios = Object.keys(specs).map((name) => get(name).rate / peer.rate);
  const cpuRatios = Object.keys(specs).map((name) => peerCpuUs / get(name).cpuUs);
  // Redis' time per call, against whichever of rate-limiter-flexible's two clients cost Redis less
  const peerRedisUs = Math.min(get("rlf-plain").redisUs, get("rlf-pipelined").redisUs);
  const redisRatios = Object.keys(specs).map((name) => peerRedisUs / get(name).redisUs);
  const range = (values: number[]) => `${Math.min(...values).toFixed(2)}–${Math.max(...values).toFixed(2)}×`;
  const row = (label: string, name: string) => {
    const { rate: value, cpuUs, rates } = get(name);
    const span = `${n(Math.min(...rates))}–${n(Math.max(...rates))}`;
    const { redisUs } = get(name);
    return `| ${label} | ${n(value)} (${span}) | ${cpuUs.toFixed(1)} µs | ${redisUs.toFixed(1)} µs | ${(value / peer.rate).toFixed(2)}× | ${(peerCpuUs / cpuUs).toFixed(2)}× |`;
  };
  console.log(
    `limits: Limiter.check / rate-limiter-flexible ${range(ratios)} (by CPU per call ${range(cpuRatios)}, by Redis time per call ${range(redisRatios)})`,
  );
  return [
    `Measured ${today()} by \`npm run bench\` (BENCH_ONLY=limits for this section alone), load average ${loadavg()[0]?.toFixed(1)} at the end: ${IN_FLIGHT} calls in flight from one Node process over ${KEYS} keys, the contenders interleaved, ${ROUNDS} rounds of ${ROUND_MS / 1000} s each, the median shown (the rounds' range in brackets); every call allowed. CPU per call is this process's; Redis time per call is the primaries' own time per script call (\`INFO commandstats\`), which load moves least. \`Limiter.check\` runs on the check API's client (createRedisCluster without autopipelining); rate-limiter-flexible on plain ioredis clients of its own, and the faster of its two is the baseline.`,
    "",
    "| Target | This run |",
    "|---|---|",
    `| \`Limiter.check\` ≥ 1.0× rate-limiter-flexible \`consume\` (calls/s, same run) | ${range(ratios)} across the five algorithms (${ratios.every((r) => r >= 1) ? "met" : "not met"}); by CPU per call ${range(cpuRatios)}; by Redis time per call ${range(redisRatios)} |`,
    "",
    "| In process, same cluster, same run | Calls/s | CPU per call | Redis time per call | vs baseline (calls/s) | vs rate-limiter-flexible's lower CPU per call |",
    "|---|---|---|---|---|---|",
    row(
      `rate-limiter-flexible \`RateLimiterRedis.consume\`, ioredis defaults${baselineName === "rlf-plain" ? " (baseline)" : ""}`,
      "rlf-plain",
    ),
    row(
      `rate-limiter-flexible \`RateLimiterRedis.consume\`, ioredis autopipelining${baselineName === "rlf-pipelined" ? " (baseline)" : ""}`,
      "rlf-pipelined",
    ),
    ...Object.keys(specs).map((name) => row(`\`Limiter.check\` ${name} (validation, its script, result)`, name)),
    "",
    "The sliding log, one key (window 100 s, max 100,000), Redis time per call from `INFO commandstats` (FCALL on the key's primary) and the round trip of sequential calls:",
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
    const usec = Number(/cmdstat_fcall:calls=\d+,usec=\d+,usec_per_call=([\d.]+)/.exec(stats)?.[1] ?? Number.NaN);
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
  // a denial finds its retry time by a binary search over cumulative costs, whatever the cost
  await measure(
    "denied, cost 2,000 (full: the retry time by binary search)",
    "full",
    () => start + WINDOW + 999,
    2_000,
  );
  await measure(
    "denied, cost 100,000 (the largest: all of the log must age out)",
    "full",
    () => start + WINDOW + 999,
    100_000,
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
  const port = await primaryPortOf(cluster, key);
  const node = primaries.find((p) => p.port === port) ?? primaries[0];
  return new Redis({ host: node?.host, port: node?.port, lazyConnect: false });
}
