// What the bench reads from the primaries: CPU time, memory once replicas caught up, the server version,
// Redis' own slowest-script figure (SLOWLOG) and the PING round trip beside it.
import calculateSlot from "cluster-key-slot";
import type { Cluster, Redis } from "ioredis";
import { percentile } from "./statistics.ts";

export async function cpuSeconds(nodes: Redis[]): Promise<number> {
  const infos = await Promise.all(nodes.map((node) => node.info("cpu")));
  return infos.reduce((sum, info) => sum + field(info, "used_cpu_user") + field(info, "used_cpu_sys"), 0);
}

/** used_memory of the primaries once their replicas have caught up (replica output buffers drained). */
export async function usedMemory(nodes: Redis[]): Promise<number> {
  for (let tries = 0; tries < 100; tries++) {
    const infos = await Promise.all(nodes.map((node) => node.info("replication")));
    const settled = infos.every((info) => {
      const offset = field(info, "master_repl_offset");
      return [...info.matchAll(/^slave\d+:.*offset=(\d+)/gm)].every((match) => Number(match[1]) === offset);
    });
    if (settled) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const infos = await Promise.all(nodes.map((node) => node.info("memory")));
  return infos.reduce((sum, info) => sum + field(info, "used_memory"), 0);
}

export async function redisVersion(nodes: Redis[]): Promise<string> {
  const info = await (nodes[0] as Redis).info("server");
  return `redis-server ${field(info, "redis_version", true)}`;
}

/**
 * The SLOWLOG threshold: every command slower than this is logged. Logging every command would put the
 * log's own memory into the bytes-per-user figures measured in the same scenario.
 */
export const SLOWLOG_THRESHOLD_MICROS = 250;

/** Logs every command slower than the threshold from now on, and forgets what was logged before. */
export async function resetSlowlog(nodes: Redis[]): Promise<void> {
  await Promise.all(
    nodes.map(async (node) => {
      await node.config("SET", "slowlog-log-slower-than", String(SLOWLOG_THRESHOLD_MICROS));
      await node.config("SET", "slowlog-max-len", "100000");
      await node.call("SLOWLOG", "RESET");
    }),
  );
}

/** The commands that run a script: cap-sends is an FCALL, the baselines' scripts EVALSHAs. */
const SCRIPT_CALLS = new Set(["fcall", "evalsha", "eval"]);

/**
 * The longest script call (FCALL/EVALSHA/EVAL) Redis itself logged since resetSlowlog, in ms (0 when none
 * reached the threshold), how many did, and the 99th percentile of those logged (a single worst case on a
 * shared machine measures its scheduling as much as the script). Logging stops and the log is emptied, so
 * nothing logged later (a baseline's run) counts in a memory figure.
 */
export async function slowestScript(nodes: Redis[]): Promise<{ ms: number; calls: number; p99: number }> {
  const logged: number[] = [];
  for (const node of nodes) {
    const entries = (await node.call("SLOWLOG", "GET", "-1")) as [number, number, number, string[]][];
    for (const [, , micros, command] of entries) {
      const name = String(command[0]).toLowerCase();
      if (!SCRIPT_CALLS.has(name)) continue;
      logged.push(micros);
    }
    await node.config("SET", "slowlog-log-slower-than", "-1");
    await node.call("SLOWLOG", "RESET");
  }
  return slowestOf(logged);
}

/** The slowest of logged script times (µs) in ms, how many there are, and their 99th percentile in ms. */
export function slowestOf(micros: readonly number[]): { ms: number; calls: number; p99: number } {
  const sorted = [...micros].sort((a, b) => a - b);
  const p99 = sorted.length === 0 ? 0 : percentile(sorted, 0.99);
  return { ms: (sorted.at(-1) ?? 0) / 1000, calls: sorted.length, p99: p99 / 1000 };
}

/**
 * The script calls (FCALL/EVALSHA/EVAL) Redis logged since resetSlowlog, in µs, each named by its keys and arguments
 * as SLOWLOG keeps them (32 at most, long ones cut) without `namespace`: a deterministic scenario run again in
 * another namespace with the same clock names the same call the same way, so runs can be matched call by
 * call. Logging stops and the log is emptied, as in slowestScript().
 */
export async function loggedScriptCalls(nodes: Redis[], namespace: string): Promise<Map<string, number>> {
  const calls = new Map<string, number>();
  for (const node of nodes) {
    const entries = (await node.call("SLOWLOG", "GET", "-1")) as [number, number, number, string[]][];
    for (const [, , micros, command] of entries) {
      const name = String(command[0]).toLowerCase();
      if (!SCRIPT_CALLS.has(name)) continue;
      const parts = command.slice(2).map((part) => String(part).replaceAll(`${namespace}:`, ""));
      calls.set(parts.join(" "), micros);
    }
    await node.config("SET", "slowlog-log-slower-than", "-1");
    await node.call("SLOWLOG", "RESET");
  }
  return calls;
}

/** p50 and p99 of `runs` PINGs to each primary, one at a time, in ms. */
export async function pingLatency(nodes: Redis[], runs = 300): Promise<{ p50: number; p99: number }> {
  const samples: number[] = [];
  for (let i = 0; i < runs; i++) {
    const node = nodes[i % nodes.length] as Redis;
    const started = performance.now();
    await node.ping();
    samples.push(performance.now() - started);
  }
  samples.sort((a, b) => a - b);
  return { p50: percentile(samples, 0.5), p99: percentile(samples, 0.99) };
}

export function field(info: string, name: string): number;
export function field(info: string, name: string, text: true): string;
export function field(info: string, name: string, text?: true): number | string {
  const value = new RegExp(`^${name}:(.*)$`, "m").exec(info)?.[1]?.trim() ?? "";
  return text ? value : Number(value);
}

/** The sum of MEMORY USAGE over the keys matching `pattern` on the primaries: the keys' own bytes. */
export async function keysMemory(nodes: Redis[], pattern: string): Promise<number> {
  let total = 0;
  for (const node of nodes) {
    let cursor = "0";
    do {
      const [next, keys] = await node.scan(cursor, "MATCH", pattern, "COUNT", 1000);
      cursor = next;
      for (const key of keys) total += Number(await node.call("MEMORY", "USAGE", key, "SAMPLES", "0"));
    } while (cursor !== "0");
  }
  return total;
}

/**
 * Fills each primary's replication backlog to its configured size (repl-backlog-size, 1 MB by default) by
 * writing and deleting a value of that size through it. Redis allocates the backlog lazily as writes
 * replicate, so a memory delta taken over a primary's first megabyte of writes would count up to 1 MB of
 * it as data: 30 B per user at 100k users over 3 primaries. Call before the "before" reading.
 */
export async function fillReplicationBacklogs(nodes: Redis[]): Promise<void> {
  for (const node of nodes) {
    const [, size] = (await node.config("GET", "repl-backlog-size")) as [string, string];
    const serves = await servedSlots(node);
    let key = "";
    for (let i = 0; key === "" && i < 100_000; i++)
      if (serves(calculateSlot(`bench-backlog-fill:${i}`))) key = `bench-backlog-fill:${i}`;
    // a little more than the backlog, so the circular buffer is full however much it held before
    const value = Buffer.alloc(Math.ceil(Number(size) * 1.1), 120);
    await node.set(key, value);
    await node.del(key);
  }
}

/** The primaries' replication backlogs now (mem_replication_backlog), in bytes. */
export async function replicationBacklogs(nodes: Redis[]): Promise<number> {
  const infos = await Promise.all(nodes.map((node) => node.info("memory")));
  return infos.reduce((sum, info) => sum + field(info, "mem_replication_backlog"), 0);
}

/**
 * Script calls (FCALL, EVALSHA and EVAL) the primaries ran so far and the microseconds Redis spent in them (INFO
 * commandstats). With `skipDown`, a node that does not answer (one a run killed) counts nothing instead of failing.
 */
export async function scriptTime(
  nodes: Redis[],
  options: { skipDown?: boolean } = {},
): Promise<{ calls: number; micros: number }> {
  const infos = await Promise.all(
    nodes.map((node) => (options.skipDown ? node.info("commandstats").catch(() => "") : node.info("commandstats"))),
  );
  let calls = 0;
  let micros = 0;
  for (const info of infos) {
    for (const match of info.matchAll(/^cmdstat_(?:fcall|evalsha|eval):calls=(\d+),usec=(\d+)/gm)) {
      calls += Number(match[1]);
      micros += Number(match[2]);
    }
  }
  return { calls, micros };
}

type SlotRanges = [from: number, to: number, primary: [host: string, port: number, ...unknown[]], ...unknown[]][];

/** Whether a slot is one that the primary `node` serves, read once from its CLUSTER SLOTS. */
export async function servedSlots(node: Redis): Promise<(slot: number) => boolean> {
  const ranges = (await node.call("CLUSTER", "SLOTS")) as SlotRanges;
  const { port } = node.options;
  const owned = ranges.filter(([, , primary]) => Number(primary[1]) === port);
  return (slot) => owned.some(([from, to]) => slot >= from && slot <= to);
}

/** The port of the primary that serves `key`'s slot, from the cluster's CLUSTER SLOTS. */
export async function primaryPortOf(cluster: Cluster, key: string): Promise<number | undefined> {
  const slot = calculateSlot(key);
  const ranges = (await cluster.cluster("SLOTS")) as unknown as SlotRanges;
  const owner = ranges.find(([from, to]) => slot >= from && slot <= to);
  return owner === undefined ? undefined : Number(owner[2][1]);
}
