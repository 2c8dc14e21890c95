// Load over HTTP for the check-api section: autocannon in its own process against one server, this process's
// and the primaries' CPU time per request over the run, and several runs of one server taken as one.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import type { Redis } from "ioredis";
import { cpuSeconds } from "./redis-stats.ts";

const execFileAsync = promisify(execFile);

/** What autocannon measured of one server, with the CPU per request over the run. */
export interface LoadResult {
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
export async function measuredLoad(
  url: string,
  body: string,
  seconds: number,
  primaries: Redis[],
): Promise<LoadResult> {
  const redisBefore = await cpuSeconds(primaries);
  const before = process.cpuUsage();
  const result = await load(url, body, seconds);
  const cpu = process.cpuUsage(before);
  const redis = (await cpuSeconds(primaries)) - redisBefore;
  return { ...result, serverUs: (cpu.user + cpu.system) / result.requests, redisUs: (redis * 1e6) / result.requests };
}

/** autocannon in its own process (32 connections), so the load generator does not share the server's event loop. */
async function load(url: string, body: string, seconds: number): Promise<LoadResult> {
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
export function combined(runs: LoadResult[]): LoadResult & { rates: number[] } {
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
