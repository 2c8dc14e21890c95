// The flood section: 32 clients, 66,560 anonymous POST /v1/frequency checks on one 256-user block (one page,
// one tag: one slot, one primary), through 32 check API execution environments of the local stack with the
// deployed 50 ms CHECK_TIMEOUT_MS. Answers by status (200/429/503, each 503 by code), the checks' latency,
// and Redis' slowest script (SLOWLOG) beside the load, once with the primaries at normal priority (a shared
// machine, as the local stack runs) and once at real-time priority (as on nodes of their own).
import { loadavg } from "node:os";
import type { Redis } from "ioredis";
import { uploadObject } from "../../functions/app/operator-actions.ts";
import { localPrincipalEvent, withLocalTenant } from "../local/local-principals.ts";
import { lambdaContext } from "../local/sqs-poller.ts";
import { type Scheduling, schedulePrimariesAs } from "./redis-priority.ts";
import { resetSlowlog, SLOWLOG_THRESHOLD_MICROS } from "./redis-stats.ts";
import { startBenchStack } from "./stack.ts";

const CLIENTS = 32;
const BLOCK_USERS = 256;
const CHECKS = BLOCK_USERS * 260;

interface FloodRun {
  scheduling: string;
  statuses: Map<string, number>;
  latencies: Float64Array;
  wallMs: number;
  /** Script calls Redis logged (µs), slowest first. */
  scripts: number[];
  load: string;
  /** Bursts the 503s came in (refusals within 100 ms of each other are one). */
  bursts: number;
}

export async function runFrequencyFlood(): Promise<string[]> {
  const stack = await startBenchStack({
    queuePrefix: "bench-flood",
    namespace: "bench-flood",
    checkApiConcurrency: CLIENTS,
    poll: false,
  });
  try {
    const { s3 } = await import("../../functions/adapters/aws-clients.ts").then(({ createAwsClients }) =>
      createAwsClients({ region: stack.endpoints.region, endpoint: stack.endpoints.awsEndpoint }),
    );
    await uploadObject(
      s3,
      stack.endpoints.bucket,
      "config/policy.json",
      JSON.stringify(
        withLocalTenant({
          version: "bench-flood",
          channels: ["push"],
          segments: [],
          default: { name: "everyone", caps: { push: [{ window: "1m", max: 2 }] } },
        }),
      ),
    );
    const environments = stack.checkApiEnvironments;
    await Promise.all(environments.map((environment) => environment.warm()));
    const first = environments[0] as (typeof environments)[number];
    const primaries = first.cluster.nodes("master") as Redis[];
    const host = "127.0.0.1";
    const ports = stack.endpoints.redis.map((node) => Number(node.split(":")[1]));
    const runs: FloodRun[] = [];
    const schedulings: Scheduling[] = ["normal", "fifo"];
    for (const [i, scheduling] of schedulings.entries()) {
      const said = await schedulePrimariesAs(host, ports, scheduling);
      // a fresh block of the same tag (tag = ID / 1024 mod 256) for each run: the 1-minute cap starts empty
      runs.push(await flood(environments, primaries, i * 1024 * 256, said));
    }
    await schedulePrimariesAs(host, ports, "fifo");
    return table(runs);
  } finally {
    await stack.stop();
  }
}

async function flood(
  environments: { handler: (event: never, context: never) => Promise<unknown> }[],
  primaries: Redis[],
  base: number,
  scheduling: string,
): Promise<FloodRun> {
  await resetSlowlog(primaries);
  const context = lambdaContext(30_000, "tollgate-check-api");
  const statuses = new Map<string, number>();
  const latencies = new Float64Array(CHECKS);
  const refusedAt: number[] = [];
  let next = 0;
  const started = performance.now();
  // one client per execution environment, one request at a time each, as Lambda runs them
  await Promise.all(
    environments.slice(0, CLIENTS).map(async (environment) => {
      while (next < CHECKS) {
        const i = next++;
        const event = localPrincipalEvent(
          "/v1/frequency",
          JSON.stringify({ userId: base + (i % BLOCK_USERS), channel: "push" }),
        );
        const t0 = performance.now();
        const reply = (await environment.handler(event as never, context as never)) as {
          statusCode: number;
          body?: string;
        };
        latencies[i] = performance.now() - t0;
        const code = answerOf(reply);
        if (code.startsWith("503")) refusedAt.push(performance.now() - started);
        statuses.set(code, (statuses.get(code) ?? 0) + 1);
      }
    }),
  );
  const wallMs = performance.now() - started;
  const load = loadavg()
    .map((value) => value.toFixed(2))
    .join(" ");
  return {
    scheduling,
    statuses,
    latencies,
    wallMs,
    scripts: await scriptCalls(primaries),
    load,
    bursts: bursts(refusedAt),
  };
}

/** An answer as the table counts it: 200 allowed or capped, or the status with its error code. */
function answerOf(reply: { statusCode: number; body?: string }): string {
  const body = JSON.parse(reply.body ?? "{}") as { allowed?: boolean; error?: { code?: string } };
  if (reply.statusCode === 200) return body.allowed ? "200 allowed" : "200 capped";
  return `${reply.statusCode} ${body.error?.code ?? ""}`.trim();
}

/** How many bursts the refusals came in: refusals less than 100 ms apart are one burst. */
function bursts(times: readonly number[]): number {
  const sorted = [...times].sort((a, b) => a - b);
  return sorted.filter((time, i) => i === 0 || time - (sorted[i - 1] as number) > 100).length;
}

/** The script calls Redis logged since resetSlowlog (µs), slowest first; logging stops. */
async function scriptCalls(nodes: Redis[]): Promise<number[]> {
  const micros: number[] = [];
  for (const node of nodes) {
    const entries = (await node.call("SLOWLOG", "GET", "-1")) as [number, number, number, string[]][];
    for (const [, , us, command] of entries) if (String(command[0]).toLowerCase() === "fcall") micros.push(us);
    await node.config("SET", "slowlog-log-slower-than", "-1");
    await node.call("SLOWLOG", "RESET");
  }
  return micros.sort((a, b) => b - a);
}

function quantile(sorted: Float64Array, q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
}

function table(runs: FloodRun[]): string[] {
  const ms = (value: number) => `${value.toFixed(value < 10 ? 2 : 0)} ms`;
  const lines = [
    `${CLIENTS} clients, ${CHECKS.toLocaleString("en-US")} anonymous POST /v1/frequency checks on one ${BLOCK_USERS}-user block (one slot) at a cap of 2 per 1m, through ${CLIENTS} check API environments of the local stack in one process (CHECK_TIMEOUT_MS 50, the deployed value). Slowest script: FCALLs in Redis' SLOWLOG over the run (commands over ${SLOWLOG_THRESHOLD_MICROS / 1000} ms are logged).`,
    "",
    "| Redis primaries | Answers by status | Checks: p50, p99, p99.9, slowest | Slowest script (over 10 ms, over 1 ms) | Load average (1, 5, 15 min) |",
    "| --- | --- | --- | --- | --- |",
  ];
  for (const run of runs) {
    const sorted = Float64Array.from(run.latencies).sort();
    const answers = [...run.statuses.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([code, count]) => `${count.toLocaleString("en-US")} × ${code}`)
      .join(", ");
    const refusals = [...run.statuses.entries()]
      .filter(([code]) => code.startsWith("503"))
      .reduce((n, [, c]) => n + c, 0);
    const burstText = refusals > 0 ? `; the 503s in ${run.bursts} burst${run.bursts === 1 ? "" : "s"}` : "";
    const slowest = run.scripts[0] ?? 0;
    const over = (us: number) => run.scripts.filter((value) => value > us).length;
    lines.push(
      `| ${run.scheduling} | ${answers}${burstText} (${Math.round((CHECKS / run.wallMs) * 1000).toLocaleString("en-US")} checks/s) | ${ms(quantile(sorted, 0.5))}, ${ms(quantile(sorted, 0.99))}, ${ms(quantile(sorted, 0.999))}, ${ms(sorted.at(-1) ?? 0)} | ${slowest === 0 ? "none logged" : ms(slowest / 1000)} (${over(10_000)}, ${over(1_000)}) | ${run.load} |`,
    );
  }
  return lines;
}
