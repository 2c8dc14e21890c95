// `npm run bench`: the capping engine against Grab's per-user design and rate-limiter-flexible, then the
// whole campaign pipeline through the local stack, in one run, on one fresh local Redis Cluster
// (3 primaries + 3 replicas), each figure beside the ceiling measured in the same run. Not a test: it
// asserts nothing, it measures. Each table replaces its marked section of docs/BENCHMARKS.md.
//
//   BENCH_USERS (1000000)  BENCH_CONCURRENCY (4 batches in flight)  BENCH_BASE_PORT (7200)
//   BENCH_ONLY (capping | workloads | pipeline | check-api | limits | quotas; default all), or `npm run bench -- quotas`
//   BENCH_WORKLOADS (sparse,week,checks,busy,big,huge: the workloads section's scenarios; default all)
//   BENCH_REDIS_SCHEDULING (fifo: the primaries at real-time priority, as on nodes of their own; or normal)
import { execFile } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { cpus, loadavg } from "node:os";
import { promisify } from "node:util";
import type { SQSClient } from "@aws-sdk/client-sqs";
import calculateSlot from "cluster-key-slot";
import { Cluster, type Redis } from "ioredis";
import { RateLimiterRedis } from "rate-limiter-flexible";
import { RoaringBitmap32 } from "roaring-wasm";
import { createAwsClients } from "../functions/adapters/aws-clients.ts";
import {
  createRedisCluster,
  RedisCapStore,
  RedisLimitStore,
  type TollgateCluster,
} from "../functions/adapters/redis-cluster.ts";
import { warmUp } from "../functions/adapters/redis-warm-up.ts";
import { pushCampaign, uploadObject, uploadRules } from "../functions/app/operator-actions.ts";
import { Capper } from "../functions/core/capping/capper.ts";
import { parsePolicy } from "../functions/core/capping/policy.ts";
import { SegmentIndex } from "../functions/core/capping/segment-index.ts";
import { Limiter } from "../functions/core/limits/limiter.ts";
import { fixedClock } from "../functions/core/shared/clock.ts";
import { perUserLogKey } from "../sdk/src/protocol/index.ts";
import { type GrabCall, runCappingWorkloads } from "./bench/capping-workloads.ts";
import { runLimitsBench } from "./bench/limits-bench.ts";
import { publishQuotas, runQuotasBench } from "./bench/quotas.ts";
import { schedulePrimaries } from "./bench/redis-priority.ts";
import { cpuSeconds, redisVersion, usedMemory } from "./bench/redis-stats.ts";
import { functionUrlEvent, startFunctionUrlServer } from "./local/function-url-server.ts";
import { lambdaContext } from "./local/sqs-poller.ts";
import { startLocalStack } from "./local-stack.ts";
import { startCluster, stopCluster } from "./redis-cluster.ts";

const execFileAsync = promisify(execFile);

const USERS = Number(process.env.BENCH_USERS ?? 1_000_000);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 4);
const BASE_PORT = Number(process.env.BENCH_BASE_PORT ?? 7200);
const BATCH = 10_000;
const DAY = 86_400_000;
const T0 = Date.UTC(2026, 10, 2, 9);
const SEGMENTS = ["new", "active", "dormant", "vip"];
const CAPS = {
  push: [
    { window: "1d", max: 1 },
    { window: "7d", max: 2 },
  ],
};

interface Phase {
  seconds: number;
  decisions: number;
  cpuSeconds: number;
  allowed: number;
}

const segmentOfUser = (id: number) => (Math.imul(id, 0x9e3779b1) >>> 0) % (SEGMENTS.length + 1);

async function main(): Promise<void> {
  const local = await startCluster({ basePort: BASE_PORT });
  const scheduling = await schedulePrimaries(local.host, local.ports);
  console.log(scheduling);
  const publish = (section: string, lines: string[]) => publishSection(section, [...lines, "", `${scheduling}.`]);
  const nodes = local.ports.slice(0, 3).map((port) => ({ host: local.host, port }));
  const clients: TollgateCluster[] = [];
  const connect = () => {
    // a saturated shared machine can hold a pipeline longer than the production 2 s command timeout
    const client = createRedisCluster({ nodes, commandTimeoutMs: 30_000 });
    clients.push(client);
    return client;
  };
  const only = process.env.BENCH_ONLY ?? process.argv[2];
  try {
    let engineRate: number | undefined;
    if (only === undefined || only === "capping") {
      const { lines, rate } = await run(connect);
      engineRate = rate;
      publish("capping", lines);
    }
    if (only === undefined || only === "workloads") {
      const cluster = connect();
      await cluster.ping();
      const lua = readFileSync(new URL("./bench/grab-sliding-log.lua", import.meta.url), "utf8");
      cluster.defineCommand("grabSlidingLog", { numberOfKeys: 1, lua });
      const grabCall = (cluster as unknown as { grabSlidingLog: GrabCall }).grabSlidingLog.bind(cluster);
      publish("workloads", await runCappingWorkloads(cluster, cluster.nodes("master"), grabCall));
    }
    if (only === undefined || only === "pipeline") publish("pipeline", await runPipeline(engineRate));
    if (only === undefined || only === "check-api") publish("check-api", await runCheckApi());
    if (only === undefined || only === "limits")
      publish("limits", await runLimitsBench({ cluster: connect(), primaries: nodes }));
  } finally {
    await Promise.all(clients.map((client) => client.quit().catch(() => {})));
    if (local.started) await stopCluster({ basePort: BASE_PORT });
  }
  // its own cluster on the same ports, started after the one above is stopped (its last run kills a primary)
  if (only === undefined || only === "quotas") publishQuotas(await runQuotasBench());
}

function publishSection(section: string, lines: string[]): void {
  const table = lines.join("\n");
  console.log(`\n${table}\n`);
  replaceSection("docs/BENCHMARKS.md", section, table);
  console.log(`updated the ${section} section of docs/BENCHMARKS.md`);
}

async function run(connect: () => TollgateCluster): Promise<{ lines: string[]; rate: number }> {
  const batches: number[][] = [];
  for (let start = 0; start < USERS; start += BATCH) {
    batches.push(Array.from({ length: Math.min(BATCH, USERS - start) }, (_, i) => start + i));
  }
  const members = SEGMENTS.map(() => new RoaringBitmap32());
  for (let id = 0; id < USERS; id++) members[segmentOfUser(id)]?.add(id);
  for (const bitmap of members) bitmap.runOptimize();
  const segments = new SegmentIndex(members);
  const policy = parsePolicy({
    version: "bench",
    channels: ["push"],
    segments: SEGMENTS.map((name) => ({ name, bitmap: `segments/${name}.roaring`, caps: CAPS })),
    default: { name: "unsegmented", caps: CAPS },
  });

  const resolutionNs = measureResolution(segments);
  console.log(`segment resolution: ${resolutionNs.toFixed(1)} ns/user`);

  const engineCluster = connect();
  await engineCluster.ping();
  const primaries = engineCluster.nodes("master");
  // each campaign is decided on its own day: the clock follows it
  const clock = fixedClock(T0);
  const capper = new Capper({
    store: new RedisCapStore(engineCluster),
    rules: () => ({ policy, segments }),
    clock,
    namespace: "bench-tg",
  });
  const engine: Phase[] = [];
  const memoryBefore = await usedMemory(primaries);
  for (let day = 0; day < 3; day++) {
    clock.set(T0 + day * DAY);
    engine.push(
      await measure(primaries, batches, async (userIds) => {
        const result = await capper.capBatch({
          campaignId: `campaign-${day}`,
          channel: "push",
          userIds,
          at: T0 + day * DAY,
        });
        return Object.values(result.totals).reduce((sum, t) => sum + t.allowed, 0);
      }),
    );
    report(`tollgate campaign ${day + 1}`, engine[day] as Phase);
  }
  const engineBytes = (await usedMemory(primaries)) - memoryBefore;

  const grabCluster = connect();
  const lua = readFileSync(new URL("./bench/grab-sliding-log.lua", import.meta.url), "utf8");
  grabCluster.defineCommand("grabSlidingLog", { numberOfKeys: 1, lua });
  const grabCall = (
    grabCluster as unknown as { grabSlidingLog: (...args: (string | number)[]) => Promise<number> }
  ).grabSlidingLog.bind(grabCluster);
  const grab: Phase[] = [];
  const grabMemoryBefore = await usedMemory(primaries);
  for (let day = 0; day < 3; day++) {
    const now = T0 + day * DAY;
    grab.push(
      await measure(primaries, batches, async (userIds) => {
        const replies = await Promise.all(
          userIds.map((id) => grabCall(perUserLogKey("bench-grab", id), now, DAY, 1, 7 * DAY, 2, now - 7 * DAY)),
        );
        return replies.reduce((sum, allowed) => sum + allowed, 0);
      }),
    );
    report(`grab per-user campaign ${day + 1}`, grab[day] as Phase);
  }
  const grabBytes = (await usedMemory(primaries)) - grabMemoryBefore;

  const limiter = new RateLimiterRedis({ storeClient: connect(), keyPrefix: "bench-rlf", points: 1, duration: 86_400 });
  const flexible = await measure(primaries, batches, async (userIds) => {
    const outcomes = await Promise.allSettled(userIds.map((id) => limiter.consume(String(id))));
    return outcomes.filter((outcome) => outcome.status === "fulfilled").length;
  });
  report("rate-limiter-flexible campaign 1", flexible);

  const ceiling = await serverCeiling(primaries, lua);
  console.log(`redis-benchmark ceiling of the per-user script: ${Math.round(ceiling)} calls/s`);

  const rate = (phase: Phase) => phase.decisions / phase.seconds;
  const cpu = (phase: Phase) => (phase.cpuSeconds / phase.decisions) * 1e6;
  const n = (value: number) => Math.round(value).toLocaleString("en-US");
  const x = (value: number) => `${value.toFixed(1)}×`;
  const us = (value: number) => `${value.toFixed(2)} µs`;
  const [e1, e2, e3] = engine as [Phase, Phase, Phase];
  const [g1, g2, g3] = grab as [Phase, Phase, Phase];
  const lines = [
    `Measured ${new Date().toISOString().slice(0, 10)} by \`npm run bench\` (BENCH_USERS=${USERS}, ${CONCURRENCY} batches of ${BATCH} in flight), ` +
      `Node ${process.version}, ${cpus().length} × ${cpus()[0]?.model ?? "cpu"}, ${await redisVersion(primaries)}, ` +
      "3 primaries + 3 replicas on loopback, one Node process.",
    "",
    "| Figure | Tollgate engine | Grab per-user sliding log | rate-limiter-flexible | Ratio / ceiling |",
    "|---|---|---|---|---|",
    `| Decisions/s, campaign 1 (empty logs) | ${n(rate(e1))} | ${n(rate(g1))} | ${n(rate(flexible))} | ${x(rate(e1) / rate(g1))} Grab, ${x(rate(e1) / rate(flexible))} rate-limiter-flexible |`,
    `| Decisions/s, campaign 2 (1 send in the logs) | ${n(rate(e2))} | ${n(rate(g2))} | | ${x(rate(e2) / rate(g2))} Grab |`,
    `| Decisions/s, campaign 3 (2 sends, all capped) | ${n(rate(e3))} | ${n(rate(g3))} | | ${x(rate(e3) / rate(g3))} Grab |`,
    `| Per-user script ceiling (redis-benchmark, all primaries at once) | | ${n(ceiling)} calls/s | | Tollgate campaign 1 = ${x(rate(e1) / ceiling)} the per-user ceiling |`,
    `| Redis primary CPU per decision, campaign 1 / 2 / 3 | ${us(cpu(e1))} / ${us(cpu(e2))} / ${us(cpu(e3))} | ${us(cpu(g1))} / ${us(cpu(g2))} / ${us(cpu(g3))} | ${us(cpu(flexible))} (campaign 1) | ${x(cpu(g2) / cpu(e2))} less CPU than Grab (campaign 2) |`,
    `| Redis memory per capped user, 2 sends in the week (used_memory, primaries) | ${(engineBytes / USERS).toFixed(1)} B | ${(grabBytes / USERS).toFixed(1)} B | | ${x(grabBytes / engineBytes)} smaller |`,
    `| Segment resolution, 4 segments, 10k-user batches | ${resolutionNs.toFixed(1)} ns/user | | | |`,
    "",
    `Allowed per campaign: Tollgate ${e1.allowed} / ${e2.allowed} / ${e3.allowed}, Grab ${g1.allowed} / ${g2.allowed} / ${g3.allowed} ` +
      `(caps 1/1d and 2/7d; campaigns a day apart), rate-limiter-flexible ${flexible.allowed} (one 1-per-day limiter).`,
    "",
    `Targets (engine issue, dense campaign): ≥ 30× Grab — this run ${x(Math.min(rate(e1) / rate(g1), rate(e2) / rate(g2), rate(e3) / rate(g3)))}–${x(Math.max(rate(e1) / rate(g1), rate(e2) / rate(g2), rate(e3) / rate(g3)))}; ` +
      `≤ 0.35 µs Redis primary CPU per decision — this run ${us(Math.min(cpu(e1), cpu(e2), cpu(e3)))}–${us(Math.max(cpu(e1), cpu(e2), cpu(e3)))}; ` +
      `≤ 8 B per user — this run ${(engineBytes / USERS).toFixed(1)} B. Baseline: the layout before page blocks and user records, ` +
      "0.20–0.34 µs and 6.7 B on a quiet machine; compare CPU only beside the load average and PING of the run.",
  ];
  return { lines, rate: rate(e1) };
}

/**
 * A campaign to every user through the local stack: pushed to the campaign queue (10,000 users a
 * message), decided by the handler that the SQS poller drives (batches of 10, 2 at once), and forwarded
 * to the delivery queue (DELIVERY_BATCH_SIZE 100). It is timed from the first push until the campaign
 * queue is drained.
 */
async function runPipeline(engineRate: number | undefined): Promise<string[]> {
  const requests = new Map<string, number>();
  const count = (client: SQSClient, role: string) =>
    client.middlewareStack.add(
      (next, context) => async (args) => {
        // GetQueueAttributes is the bench's own polling for "drained", not part of the pipeline
        if (context.commandName !== "GetQueueAttributesCommand") {
          const key = `${role} ${context.commandName}`;
          requests.set(key, (requests.get(key) ?? 0) + 1);
        }
        return next(args);
      },
      { step: "initialize", name: `benchCount${role}` },
    );
  let decideMs = 0;
  let forwardMs = 0;
  const stack = await startLocalStack({
    redisBasePort: BASE_PORT,
    writeEndpoints: false,
    queuePrefix: "bench",
    environment: { KEY_NAMESPACE: `bench-pipeline-${Date.now()}` },
    onOutcome: (outcome) => {
      if (outcome.kind !== "forwarded") return;
      decideMs += outcome.timings.decideMs;
      forwardMs += outcome.timings.forwardMs;
    },
  });
  try {
    const { endpoints } = stack;
    const { s3, sqs } = createAwsClients({ region: endpoints.region, endpoint: endpoints.awsEndpoint });
    const members: Record<string, number[]> = Object.fromEntries(SEGMENTS.map((name) => [name, []]));
    for (let id = 0; id < USERS; id++) members[SEGMENTS[segmentOfUser(id)] as string]?.push(id);
    await uploadRules(
      s3,
      endpoints.bucket,
      {
        version: "bench",
        channels: ["push"],
        segments: SEGMENTS.map((name) => ({ name, bitmap: `segments/${name}.roaring`, caps: CAPS })),
        default: { name: "unsegmented", caps: CAPS },
      },
      members,
    );
    count(sqs, "push");
    count(stack.sqs, "event-source");
    count(stack.consumer.sqs, "handler");
    const userIds = Array.from({ length: USERS }, (_, i) => i);
    const started = performance.now();
    await pushCampaign(sqs, endpoints.campaignQueueUrl, { campaignId: "bench-e2e", channel: "push", userIds });
    await stack.poller.drained(600_000);
    const seconds = (performance.now() - started) / 1000;
    const { handlerMs, invocations, failedRecords } = stack.poller.stats;
    const per1000 = (prefix: string) =>
      ([...requests].filter(([key]) => key.startsWith(prefix)).reduce((sum, [, n]) => sum + n, 0) * 1000) / USERS;
    const list = (prefix: string) =>
      [...requests]
        .filter(([key]) => key.startsWith(prefix))
        .map(([key, n]) => `${key.split(" ")[1]} ${n}`)
        .join(", ");
    // a batch's records run at once: their times are shares of their own sum, not of the handler's time
    const share = (ms: number) => `${((100 * ms) / (decideMs + forwardMs)).toFixed(0)}%`;
    const rate = USERS / seconds;
    console.log(`pipeline: ${Math.round(rate)} users/s, ${invocations} invocations, ${failedRecords} failed records`);
    return [
      `Measured ${new Date().toISOString().slice(0, 10)} by \`npm run bench\` (BENCH_USERS=${USERS}): one campaign to every user, ` +
        "pushed as 10,000-user messages, handler batches of 10 with 2 invocations at once, DELIVERY_BATCH_SIZE 100, fauxqs in the same Node process.",
      "",
      "| Figure | Value |",
      "|---|---|",
      `| End-to-end users/s (first push → campaign queue drained, sends on the delivery queue) | ${Math.round(rate).toLocaleString("en-US")} |`,
      engineRate === undefined
        ? "| Engine alone, same run | (run without BENCH_ONLY to compare) |"
        : `| Engine alone, same run (capping table, campaign 1) | ${Math.round(engineRate).toLocaleString("en-US")} decisions/s: the pipeline runs at ${((100 * rate) / engineRate).toFixed(0)}% of it |`,
      `| Record time deciding (segments + Redis), of the records' summed time | ${share(decideMs)} |`,
      `| Record time forwarding (delivery messages built, SendMessageBatch to the delivery queue) | ${share(forwardMs)} |`,
      `| Records' summed time / handler time (a batch's records run at once) | ${((decideMs + forwardMs) / handlerMs).toFixed(1)}× |`,
      `| Handler invocations / failed records | ${invocations} / ${failedRecords} |`,
      `| SQS requests per 1,000 users: campaign push | ${per1000("push").toFixed(2)} (${list("push")}) |`,
      `| SQS requests per 1,000 users: event source (receive, delete) | ${per1000("event-source").toFixed(2)} (${list("event-source")}) |`,
      `| SQS requests per 1,000 users: handler (delivery, DLQ) | ${per1000("handler").toFixed(2)} (${list("handler")}) |`,
    ];
  } finally {
    await stack.stop();
  }
}

/** Runs `work` over every batch, CONCURRENCY at a time, with the primaries' CPU time read before and after. */
async function measure(
  primaries: Redis[],
  batches: number[][],
  work: (userIds: number[]) => Promise<number>,
): Promise<Phase> {
  const cpuBefore = await cpuSeconds(primaries);
  const started = performance.now();
  let next = 0;
  let allowed = 0;
  let decisions = 0;
  const worker = async () => {
    while (next < batches.length) {
      const batch = batches[next++] as number[];
      // not `allowed += await ...`: that reads `allowed` before the await and loses other workers' updates
      const allowedInBatch = await work(batch);
      allowed += allowedInBatch;
      decisions += batch.length;
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const seconds = (performance.now() - started) / 1000;
  return { seconds, decisions, allowed, cpuSeconds: (await cpuSeconds(primaries)) - cpuBefore };
}

function report(label: string, phase: Phase): void {
  console.log(
    `${label}: ${Math.round(phase.decisions / phase.seconds)} decisions/s, ` +
      `${((phase.cpuSeconds / phase.decisions) * 1e6).toFixed(2)} µs primary CPU/decision, ${phase.allowed} allowed`,
  );
}

/** ns per user to resolve 100 sorted batches of 10k random users (after a warm-up pass). */
function measureResolution(segments: SegmentIndex): number {
  const batches = Array.from({ length: 100 }, (_, b) => {
    const ids = new Uint32Array(BATCH);
    for (let i = 0; i < BATCH; i++) ids[i] = (Math.imul(b * BATCH + i, 0x2545f491) >>> 0) % USERS;
    return ids.sort();
  });
  for (const ids of batches) segments.resolveSorted(ids);
  const started = process.hrtime.bigint();
  for (const ids of batches) segments.resolveSorted(ids);
  return Number(process.hrtime.bigint() - started) / (batches.length * BATCH);
}

/** What the primaries can do with the per-user script alone: one redis-benchmark per primary, all at once. */
async function serverCeiling(primaries: Redis[], lua: string): Promise<number> {
  const now = T0 + 10 * DAY;
  const runs = primaries.map(async (node) => {
    const sha = (await node.script("LOAD", lua)) as string;
    const port = node.options.port as number;
    const owned = new Set<number>();
    const ranges = (await node.call("CLUSTER", "SLOTS")) as [number, number, [string, number]][];
    for (const [from, to, [, masterPort]] of ranges)
      if (masterPort === port) for (let s = from; s <= to; s++) owned.add(s);
    let tag = 0;
    while (!owned.has(calculateSlot(`{ceiling-${tag}}`))) tag++;
    const key = perUserLogKey("bench-ceiling", "__rand_int__", `ceiling-${tag}`);
    const { stdout } = await execFileAsync(
      "redis-benchmark",
      [
        "-h",
        "127.0.0.1",
        "-p",
        String(port),
        "-c",
        "32",
        "-P",
        "16",
        "-n",
        "300000",
        "-r",
        String(USERS),
        "--csv",
        "EVALSHA",
        sha,
        "1",
        key,
        String(now),
        String(DAY),
        "1",
        String(7 * DAY),
        "2",
        String(now - 7 * DAY),
      ],
      { timeout: 120_000 },
    );
    const last = stdout.trim().split("\n").pop() ?? "";
    return Number(last.split(",")[1]?.replaceAll('"', ""));
  });
  return (await Promise.all(runs)).reduce((sum, rps) => sum + rps, 0);
}

/** Replaces the text between `<!-- bench:NAME:start -->` and `<!-- bench:NAME:end -->`. */
function replaceSection(path: string, name: string, body: string): void {
  const start = `<!-- bench:${name}:start -->`;
  const end = `<!-- bench:${name}:end -->`;
  const text = readFileSync(path, "utf8");
  const from = text.indexOf(start);
  const to = text.indexOf(end);
  if (from < 0 || to < from) throw new Error(`${path} has no ${start} ... ${end} section`);
  writeFileSync(path, `${text.slice(0, from + start.length)}\n${body}\n${text.slice(to)}`);
}

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] as number;
const ms = (value: number) => `${value.toFixed(3)} ms`;

/** p50 and p99 of `runs` sequential calls of `call(i)`, after a warm-up. */
async function latencies(runs: number, call: (i: number) => Promise<unknown>): Promise<{ p50: number; p99: number }> {
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

/** Calls per second of `call` with 32 in flight for `ms`, and this process's CPU time per call. */
async function throughput(call: () => Promise<unknown>, ms = 3000): Promise<{ rps: number; cpuUs: number }> {
  let calls = 0;
  const end = Date.now() + ms;
  const cpuBefore = process.cpuUsage();
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (Date.now() < end) {
        await call();
        calls++;
      }
    }),
  );
  const cpu = process.cpuUsage(cpuBefore);
  return { rps: (calls * 1000) / ms, cpuUs: (cpu.user + cpu.system) / calls };
}

/** `throughput` of each call in turn, 1 s at a time for 5 rounds, averaged per call. */
async function inTurns<K extends string>(
  calls: Record<K, () => Promise<unknown>>,
): Promise<Record<K, { rps: number; cpuUs: number; rates: number[] }>> {
  const names = Object.keys(calls) as K[];
  const runs = new Map<K, { rps: number; cpuUs: number }[]>(names.map((name) => [name, []]));
  for (let round = 0; round < 5; round++)
    for (const name of names) runs.get(name)?.push(await throughput(calls[name], 1000));
  const mean = (values: number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;
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
  ) as Record<K, { rps: number; cpuUs: number; rates: number[] }>;
}

/** Runs each call on a free worker, one call per worker at a time (as one per execution environment). */
function oneCallEach<A, R>(workers: readonly ((arg: A) => Promise<R>)[]): (arg: A) => Promise<R> {
  const idle = [...workers];
  const waiting: ((worker: (arg: A) => Promise<R>) => void)[] = [];
  return async (arg) => {
    const worker = idle.pop() ?? (await new Promise<(arg: A) => Promise<R>>((resolve) => waiting.push(resolve)));
    try {
      return await worker(arg);
    } finally {
      const next = waiting.shift();
      if (next) next(worker);
      else idle.push(worker);
    }
  };
}

/** autocannon in its own process, so the load generator does not share the server's event loop. */
interface LoadResult {
  rps: number;
  p99: number;
  errors: number;
  ok: number;
  statuses: string;
  codes: Record<string, number>;
  /** Answers counted by autocannon. */
  requests: number;
  /**
   * CPU per request of this process (every server under load runs in it, one at a time) and of the
   * primaries (INFO cpu): on 2 cores what the load around a run moves least, where requests/s move most.
   */
  serverUs: number;
  redisUs: number;
}

/** `load`, with this process's and the primaries' CPU time per request over the run. */
async function measuredLoad(url: string, body: string, seconds: number, primaries: Redis[]): Promise<LoadResult> {
  const redisBefore = await cpuSeconds(primaries);
  const before = process.cpuUsage();
  const result = await load(url, body, seconds);
  const cpu = process.cpuUsage(before);
  const redis = (await cpuSeconds(primaries)) - redisBefore;
  return { ...result, serverUs: (cpu.user + cpu.system) / result.requests, redisUs: (redis * 1e6) / result.requests };
}

async function load(url: string, body: string, seconds = 10): Promise<LoadResult> {
  const { stdout } = await execFileAsync(
    "node_modules/.bin/autocannon",
    ["-j", "-c", "32", "-d", String(seconds), "-m", "POST", "-H", "content-type=application/json", "-b", body, url],
    { timeout: 60_000, maxBuffer: 16 * 1024 * 1024 },
  );
  const report = JSON.parse(stdout) as {
    requests: { average: number; total: number };
    latency: { p99: number };
    errors: number;
    non2xx: number;
    statusCodeStats?: Record<string, { count: number }>;
  };
  const codes = Object.fromEntries(
    Object.entries(report.statusCodeStats ?? {}).map(([code, { count }]) => [code, count]),
  );
  return {
    rps: report.requests.average,
    p99: report.latency.p99,
    errors: report.errors + report.non2xx,
    ok: codes["200"] ?? 0,
    statuses: statusText(codes),
    codes,
    requests: report.requests.total,
    serverUs: Number.NaN,
    redisUs: Number.NaN,
  };
}

const statusText = (codes: Record<string, number>) =>
  Object.entries(codes)
    .map(([code, count]) => `${count.toLocaleString("en-US")} × ${code}`)
    .join(", ");

/** Several runs of one server as one: mean rate, worst p99, every answer counted. */
function combined(runs: LoadResult[]): LoadResult & { rates: number[] } {
  const codes: Record<string, number> = {};
  for (const run of runs)
    for (const [code, count] of Object.entries(run.codes)) codes[code] = (codes[code] ?? 0) + count;
  const requests = runs.reduce((sum, run) => sum + run.requests, 0);
  const perRequest = (cost: (run: LoadResult) => number) =>
    runs.reduce((sum, run) => sum + cost(run) * run.requests, 0) / requests;
  return {
    rps: runs.reduce((sum, run) => sum + run.rps, 0) / runs.length,
    rates: runs.map((run) => run.rps),
    requests,
    serverUs: perRequest((run) => run.serverUs),
    redisUs: perRequest((run) => run.redisUs),
    p99: Math.max(...runs.map((run) => run.p99)),
    errors: runs.reduce((sum, run) => sum + run.errors, 0),
    ok: codes["200"] ?? 0,
    statuses: statusText(codes),
    codes,
  };
}

/** rate-limiter-flexible behind the smallest Node HTTP server: the body's key, consumed, as JSON. */
async function rlfServer(rlf: RateLimiterRedis): Promise<{ url: string; stop(): Promise<void> }> {
  const server = createServer((request, response) => {
    let text = "";
    request.on("data", (chunk: Buffer) => {
      text += chunk;
    });
    request.on("end", () => {
      const { key } = JSON.parse(text) as { key: string };
      rlf.consume(key).then(
        (res) => {
          // with its length, as the local Function URL server answers (not in chunked transfer coding)
          const reply = JSON.stringify({ allowed: true, remaining: res.remainingPoints });
          response
            .writeHead(200, { "content-type": "application/json", "content-length": String(Buffer.byteLength(reply)) })
            .end(reply);
        },
        () => response.writeHead(429).end(),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}/`,
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/**
 * The check API: the handler in process, one request at a time, per algorithm, beside a bare Redis round
 * trip (the floor); then the local Function URL server under autocannon, beside rate-limiter-flexible
 * behind an HTTP server as small.
 */
async function runCheckApi(): Promise<string[]> {
  // 32 execution environments for autocannon's 32 connections, as Lambda would scale to them
  const stack = await startLocalStack({
    redisBasePort: BASE_PORT,
    writeEndpoints: false,
    queuePrefix: "bench-check",
    environment: { KEY_NAMESPACE: `bench-check-${Date.now()}` },
    checkApiConcurrency: 32,
    // no campaign queue here: its poller's long polls cost this process 2 % of a core, which the CPU per
    // request of every server measured in it would carry
    poll: false,
  });
  const servers: { stop(): Promise<void> }[] = [];
  try {
    const { s3 } = createAwsClients({ region: stack.endpoints.region, endpoint: stack.endpoints.awsEndpoint });
    await uploadObject(
      s3,
      stack.endpoints.bucket,
      "config/policy.json",
      JSON.stringify({
        version: "bench",
        channels: ["push"],
        segments: [],
        // the largest cap a policy may hold: no user of the frequency rows reaches it
        default: { name: "everyone", caps: { push: [{ window: "1d", max: 10_000 }] } },
      }),
    );
    // one execution environment, one request at a time, for the latencies
    const [first] = stack.checkApiEnvironments;
    const firstHandler = (first as (typeof stack.checkApiEnvironments)[number]).handler;
    // a latency is only worth printing with the answers it measured: each row counts what was not a 200
    const refused = new Map<number, number>();
    const handler = async (event: Parameters<typeof firstHandler>[0], context: Parameters<typeof firstHandler>[1]) => {
      const response = await firstHandler(event, context);
      const status = response.statusCode ?? 200;
      if (status !== 200) refused.set(status, (refused.get(status) ?? 0) + 1);
      return response;
    };
    /** What was not a 200 since the last row, e.g. " (3 × 503)", and starts counting again. */
    const notOk = () => {
      const text = [...refused].map(([status, count]) => `${count} × ${status}`).join(", ");
      refused.clear();
      return text ? ` (${text})` : "";
    };
    const limits: Record<string, object> = {
      "token-bucket": { algorithm: "token-bucket", max: 1_000_000, refillAmount: 1, refillEveryMs: 1000 },
      "sliding-window": { algorithm: "sliding-window", max: 1_000_000, windowMs: 60_000 },
      "sliding-log": { algorithm: "sliding-log", max: 100_000, windowMs: 60_000 },
      "fixed-window": { algorithm: "fixed-window", max: 1_000_000, windowMs: 60_000 },
      gcra: { algorithm: "gcra", burst: 1_000_000, count: 1000, periodMs: 1000 },
    };
    const context = lambdaContext(30_000);
    const rows: string[] = [];
    const floor = await latencies(2000, () => (first as (typeof stack.checkApiEnvironments)[number]).cluster.ping());
    rows.push(`| Redis round trip (PING, same client): the floor | ${ms(floor.p50)} | ${ms(floor.p99)} |`);
    for (const [name, spec] of Object.entries(limits)) {
      // 1,000 keys in turn: every request is allowed and reaches Redis (no negative-cache answers)
      const result = await latencies(2000, (i) =>
        handler(functionUrlEvent("POST", "/v1/limit", JSON.stringify({ key: `k${i % 1000}`, ...spec })), context),
      );
      rows.push(`| POST /v1/limit ${name}${notOk()} | ${ms(result.p50)} | ${ms(result.p99)} |`);
    }
    const frequency = await latencies(2000, (i) =>
      handler(
        functionUrlEvent("POST", "/v1/frequency", JSON.stringify({ userId: i + 1000, channel: "push" })),
        context,
      ),
    );
    rows.push(`| POST /v1/frequency${notOk()} | ${ms(frequency.p50)} | ${ms(frequency.p99)} |`);
    // one block (256 consecutive users) whose log grows: the cost must not follow its history
    const inBlock = (i: number) =>
      handler(
        functionUrlEvent("POST", "/v1/frequency", JSON.stringify({ userId: 512_000 + (i & 255), channel: "push" })),
        context,
      );
    const freshBlock = await latencies(1000, inBlock);
    rows.push(
      `| POST /v1/frequency, one block, its first 1,200 checks${notOk()} | ${ms(freshBlock.p50)} | ${ms(freshBlock.p99)} |`,
    );
    // the block's history, one check at a time (a burst on one block would measure contention instead)
    for (let i = 1200; i < 10_000; i++) await inBlock(i);
    const filling = notOk();
    const grownBlock = await latencies(2000, inBlock);
    rows.push(
      `| POST /v1/frequency, the same block after 10,000 earlier checks${filling}${notOk()} | ${ms(grownBlock.p50)} | ${ms(grownBlock.p99)} |`,
    );

    // rate-limiter-flexible on plain ioredis clients of its own, as its users run it: the library's
    // defaults, and with autopipelining (one client serves all 32 connections); the faster is the baseline
    const redisNodes = stack.endpoints.redis
      .slice(0, 3)
      .map((node) => ({ host: "127.0.0.1", port: Number(node.split(":")[1]) }));
    const rlfServers: Record<"plain" | "pipelined", string> = { plain: "", pipelined: "" };
    const rlfs = new Map<"plain" | "pipelined", RateLimiterRedis>();
    for (const kind of ["plain", "pipelined"] as const) {
      const rlfClient = new Cluster(redisNodes, { enableAutoPipelining: kind === "pipelined" });
      const limiter = new RateLimiterRedis({
        storeClient: rlfClient,
        keyPrefix: `bench-http-${Date.now()}`,
        points: 1_000_000_000,
        duration: 60,
      });
      rlfs.set(kind, limiter);
      const { url, stop } = await rlfServer(limiter);
      rlfServers[kind] = url;
      servers.push({
        stop: async () => {
          await stop();
          rlfClient.disconnect();
        },
      });
    }
    // rate-limiter-flexible in the same emulation as the check API: 32 execution environments, each with its
    // own plain client (one command at a time: nothing to pipeline), one invocation each at a time, behind the
    // same local Function URL server. Against this row the ratio is the code's alone; against the servers
    // above it is the code's and the Lambda model's together.
    const rlfEnvironments = await Promise.all(
      stack.checkApiEnvironments.map(async () => {
        const client = new Cluster(redisNodes, { enableAutoPipelining: false });
        await warmUp(client, { timeoutMs: 4_000 });
        const limiter = new RateLimiterRedis({
          storeClient: client,
          keyPrefix: `bench-http-lambda-${Date.now()}`,
          points: 1_000_000_000,
          duration: 60,
        });
        return { client, limiter };
      }),
    );
    const rlfLambda = await startFunctionUrlServer(
      rlfEnvironments.map(({ limiter }) => async (event: ReturnType<typeof functionUrlEvent>) => {
        const { key } = JSON.parse(event.body ?? "{}") as { key: string };
        try {
          const res = await limiter.consume(key);
          return {
            statusCode: 200,
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ allowed: true, remaining: res.remainingPoints }),
          };
        } catch {
          return { statusCode: 429 };
        }
      }),
    );
    servers.push({
      stop: async () => {
        await rlfLambda.stop();
        for (const { client } of rlfEnvironments) client.disconnect();
      },
    });
    // a year-long window: a run never crosses an epoch-aligned window boundary, so every charge stays counted
    const body = JSON.stringify({
      key: "http-bench",
      algorithm: "fixed-window",
      max: 1_000_000_000,
      windowMs: 365 * DAY,
    });
    const primaries = (first as (typeof stack.checkApiEnvironments)[number]).cluster.nodes("master");
    // the servers take turns, 5 s each, twice: load from outside this run falls on all of them alike
    const runs: Record<"ours" | "plain" | "pipelined" | "lambda", LoadResult[]> = {
      ours: [],
      plain: [],
      pipelined: [],
      lambda: [],
    };
    for (let round = 0; round < 2; round++) {
      runs.ours.push(await measuredLoad(`${stack.endpoints.functionUrl}/v1/limit`, body, 5, primaries));
      runs.plain.push(await measuredLoad(rlfServers.plain, body, 5, primaries));
      runs.pipelined.push(await measuredLoad(rlfServers.pipelined, body, 5, primaries));
      runs.lambda.push(await measuredLoad(rlfLambda.url, body, 5, primaries));
    }
    const ours = combined(runs.ours);
    const theirsLambda = combined(runs.lambda);
    const theirsPlain = combined(runs.plain);
    const theirsPipelined = combined(runs.pipelined);
    const baseline = theirsPlain.rps >= theirsPipelined.rps ? "plain" : "pipelined";
    const theirs = baseline === "plain" ? theirsPlain : theirsPipelined;
    const rlf = rlfs.get(baseline) as RateLimiterRedis;
    // every 200 charged 1; more charges than 200s are requests answered otherwise (or still in flight,
    // at most 32, when autocannon stopped) that were charged all the same
    const peek = await handler(
      functionUrlEvent("POST", "/v1/limit", JSON.stringify({ ...JSON.parse(body), cost: 0 })),
      context,
    );
    const charged = 1_000_000_000 - (JSON.parse(peek.body ?? "{}") as { remaining: number }).remaining;
    // where the HTTP figure goes: the same request with 32 in flight, without HTTP, layer by layer
    const parsed = JSON.parse(body) as Record<string, unknown>;
    const namespace = `bench-layers-${Date.now()}`;
    const limiterOn = (cluster: TollgateCluster) =>
      new Limiter({ store: new RedisLimitStore(cluster, { deadlineMs: 1000 }), namespace });
    const environments = stack.checkApiEnvironments;
    const oneClient = limiterOn((first as (typeof environments)[number]).cluster);
    const perEnvironment = oneCallEach(
      environments.map((environment) => {
        const limiter = limiterOn(environment.cluster);
        return (request: unknown) => limiter.check(request);
      }),
    );
    const event = functionUrlEvent("POST", "/v1/limit", body);
    const handlers = oneCallEach(
      environments.map(
        (environment) => (event: ReturnType<typeof functionUrlEvent>) => environment.handler(event, context),
      ),
    );
    const rlfPerEnvironment = oneCallEach(
      rlfEnvironments.map(
        ({ limiter }) =>
          (key: string) =>
            limiter.consume(key),
      ),
    );
    // the layers take turns, 1 s each, 5 rounds: load from outside this run falls on all of them alike
    const layers = await inTurns({
      limiter: () => oneClient.check(parsed),
      limiterPerEnvironment: () => perEnvironment(parsed),
      // the event is built once, as the Lambda runtime (not the handler) builds it
      handler: () => handlers(event),
      rlf: () => rlf.consume("layers"),
      rlfPerEnvironment: () => rlfPerEnvironment("layers"),
    });
    console.log(
      `check api http: ${Math.round(ours.rps)} req/s vs rate-limiter-flexible ${Math.round(theirs.rps)} req/s; ` +
        `${ours.statuses}; ${charged} charged`,
    );
    const n = (value: number) => Math.round(value).toLocaleString("en-US");
    const layer = (name: string, { rps, cpuUs }: { rps: number; cpuUs: number }, ratio: string) =>
      `| ${name} | ${n(rps)} | ${cpuUs.toFixed(0)} µs | ${ratio} |`;
    const n32 = environments.length;
    // per round, each layer against the one below it in the same round
    const perRound = (a: number[], b: number[]) => a.map((value, i) => value / (b[i] as number));
    const span = (values: number[]) => `${Math.min(...values).toFixed(2)}–${Math.max(...values).toFixed(2)}`;
    const handlerLayer = layers.handler.rps / layers.limiterPerEnvironment.rps;
    const httpRatio = ours.rps / theirs.rps;
    const lambdaRatio = ours.rps / theirsLambda.rps;
    const verdict = (met: boolean) => (met ? "met" : "not met");
    const us = (value: number) => `${value.toFixed(0)} µs`;
    /** theirs / ours, CPU per request (the server's, Redis', or both): above 1 when ours costs less. */
    const cpuRatio = (theirs: LoadResult, ours: LoadResult, part?: "serverUs" | "redisUs") => {
      const cost = (run: LoadResult) => (part ? run[part] : run.serverUs + run.redisUs);
      return `${(cost(theirs) / cost(ours)).toFixed(2)}×`;
    };
    return [
      `Measured ${new Date().toISOString().slice(0, 10)} by \`npm run bench\`, load average ${loadavg()[0]?.toFixed(1)} at the end of the section.`,
      "",
      "| Target | This run |",
      "|---|---|",
      `| Handler layer: handler throughput / \`Limiter.check\` throughput, ${n32} execution environments, ≥ 0.8 | ${handlerLayer.toFixed(2)} (rounds ${span(perRound(layers.handler.rates, layers.limiterPerEnvironment.rates))}; by CPU per call ${(layers.limiterPerEnvironment.cpuUs / layers.handler.cpuUs).toFixed(2)}): ${verdict(handlerLayer >= 0.8)} |`,
      `| HTTP: local Function URL server / rate-limiter-flexible behind a minimal server ≥ 0.7× | ${httpRatio.toFixed(2)}× (rounds ${span(perRound(ours.rates, theirs.rates))}×; by CPU per request, server and Redis: ${cpuRatio(theirs, ours)}): ${verdict(httpRatio >= 0.7)} |`,
      `| What the ${n32} Lambda-like environments cost: \`Limiter.check\` on ${n32} clients / on one | ${(layers.limiterPerEnvironment.rps / layers.limiter.rps).toFixed(2)}× (rounds ${span(perRound(layers.limiterPerEnvironment.rates, layers.limiter.rates))}×; by CPU per call ${(layers.limiter.cpuUs / layers.limiterPerEnvironment.cpuUs).toFixed(2)}×) |`,
      `| The same for rate-limiter-flexible: \`consume\` on ${n32} clients / on one | ${(layers.rlfPerEnvironment.rps / layers.rlf.rps).toFixed(2)}× (rounds ${span(perRound(layers.rlfPerEnvironment.rates, layers.rlf.rates))}×; by CPU per call ${(layers.rlf.cpuUs / layers.rlfPerEnvironment.cpuUs).toFixed(2)}×) |`,
      `| HTTP, both in the same ${n32} Lambda-like environments: local Function URL server, check API / rate-limiter-flexible | ${lambdaRatio.toFixed(2)}× (rounds ${span(perRound(ours.rates, theirsLambda.rates))}×; by CPU per request, server and Redis: ${cpuRatio(theirsLambda, ours)}) |`,
      "",
      "2,000 sequential requests per row after 200 warm-up ones (1,000 for a fresh block), the handler called in process (payload 2.0 events, Powertools logger), on the bench cluster.",
      "",
      "| In process, one request at a time | p50 | p99 |",
      "|---|---|---|",
      ...rows,
      "",
      `Over HTTP on loopback, autocannon in its own process (32 connections), one key, a limit never reached, the servers taking turns (5 s each, 2 rounds; mean rate, rounds in brackets); the check API runs ${n32} execution environments, one invocation each at a time, as Lambda would; rate-limiter-flexible runs on plain ioredis clients of its own, and the faster is the baseline. CPU per request: this Node process's (every server runs in it, one under load at a time) and the primaries' (INFO cpu), over the same runs: what load from outside the run moves least:`,
      "",
      "| Server | Requests/s | p99 | Server CPU per request | Redis CPU per request | Answers |",
      "|---|---|---|---|---|---|",
      `| Tollgate local Function URL server, POST /v1/limit fixed-window | ${n(ours.rps)} (${ours.rates.map(n).join(", ")}) | ${ours.p99} ms | ${us(ours.serverUs)} | ${us(ours.redisUs)} | ${ours.statuses}; ${n(charged)} charged |`,
      `| rate-limiter-flexible \`RateLimiterRedis.consume\` behind a minimal Node HTTP server, ioredis defaults${baseline === "plain" ? " (baseline)" : ""} | ${n(theirsPlain.rps)} (${theirsPlain.rates.map(n).join(", ")}) | ${theirsPlain.p99} ms | ${us(theirsPlain.serverUs)} | ${us(theirsPlain.redisUs)} | ${theirsPlain.statuses} |`,
      `| the same, ioredis autopipelining${baseline === "pipelined" ? " (baseline)" : ""} | ${n(theirsPipelined.rps)} (${theirsPipelined.rates.map(n).join(", ")}) | ${theirsPipelined.p99} ms | ${us(theirsPipelined.serverUs)} | ${us(theirsPipelined.redisUs)} | ${theirsPipelined.statuses} |`,
      `| Ratio | ${httpRatio.toFixed(2)}× | | ${cpuRatio(theirs, ours, "serverUs")} | ${cpuRatio(theirs, ours, "redisUs")} | |`,
      `| rate-limiter-flexible \`consume\` in ${n32} Lambda-like environments behind the same local Function URL server (one plain client each, one invocation each at a time) | ${n(theirsLambda.rps)} (${theirsLambda.rates.map(n).join(", ")}) | ${theirsLambda.p99} ms | ${us(theirsLambda.serverUs)} | ${us(theirsLambda.redisUs)} | ${theirsLambda.statuses} |`,
      `| Ratio, both in the same environments | ${lambdaRatio.toFixed(2)}× | | ${cpuRatio(theirsLambda, ours, "serverUs")} | ${cpuRatio(theirsLambda, ours, "redisUs")} | |`,
      "",
      "The same request in process, 32 in flight, layer by layer, the layers taking turns (1 s each, 5 rounds) (CPU: this Node process's, per call; Redis runs in its own processes). The handler's event is built once: the Lambda runtime builds it, not the handler.",
      "",
      "| Layer | Requests/s | CPU per call | Ratio |",
      "|---|---|---|---|",
      layer("`Limiter.check` (validation, Lua, result), one Redis client", layers.limiter, ""),
      layer(
        `\`Limiter.check\` on ${n32} clients, one call each at a time (as ${n32} execution environments)`,
        layers.limiterPerEnvironment,
        `${(layers.limiterPerEnvironment.rps / layers.limiter.rps).toFixed(2)}× one client: what ${n32} environments cost ` +
          `(by CPU per call: ${(layers.limiter.cpuUs / layers.limiterPerEnvironment.cpuUs).toFixed(2)}×)`,
      ),
      layer(
        `the handler (Powertools logger and metrics, routing, JSON, headers), ${n32} execution environments`,
        layers.handler,
        `${(layers.handler.rps / layers.limiterPerEnvironment.rps).toFixed(2)}× the line above: the handler layer ` +
          `(by CPU per call: ${(layers.limiterPerEnvironment.cpuUs / layers.handler.cpuUs).toFixed(2)}×)`,
      ),
      layer(
        `\`RateLimiterRedis.consume\`, one Redis client (${baseline === "plain" ? "ioredis defaults" : "autopipelining"})`,
        layers.rlf,
        "",
      ),
      layer(
        `\`RateLimiterRedis.consume\` on ${n32} plain clients, one call each at a time (as ${n32} execution environments)`,
        layers.rlfPerEnvironment,
        `${(layers.rlfPerEnvironment.rps / layers.rlf.rps).toFixed(2)}× one client (by CPU per call: ${(layers.rlf.cpuUs / layers.rlfPerEnvironment.cpuUs).toFixed(2)}×)`,
      ),
    ];
  } finally {
    for (const server of servers) await server.stop();
    await stack.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
