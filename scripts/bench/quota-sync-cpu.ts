// Redis CPU of the quota-sync chunk per key updated, read from INFO commandstats (the script's own time,
// the commands it calls included) on the primaries, for a few rule shapes and call sizes. Usage:
//   REDIS_CLUSTER_BASE_PORT=7300 npx tsx scripts/bench/quota-sync-cpu.ts   (a cluster must be running)
import type { Redis } from "ioredis";
import { createRedisCluster, type TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import { RedisQuotaStore } from "../../functions/adapters/redis-quota-store.ts";
import type { QuotaRule, SyncRequest } from "../../sdk/src/protocol/index.ts";
import { setStoreClock, testClockQuotaLibrary } from "../../test/support/quota-test-clock.ts";
import { isMain } from "../is-main.ts";

const T0 = Date.UTC(2026, 10, 2, 9);
const SYNC_EVERY_MS = 50;

export interface SyncShape {
  name: string;
  rule: QuotaRule;
  keysPerCall: number;
}

const oneAndFive = [
  { windowMs: 1000, max: 1000 },
  { windowMs: 5000, max: 4000 },
];
export const SYNC_SHAPES: SyncShape[] = [
  { name: "approximate 1 s + 5 s", rule: approximate(oneAndFive), keysPerCall: 1 },
  { name: "approximate 1 s + 5 s", rule: approximate(oneAndFive), keysPerCall: 20 },
  {
    name: "approximate 1 s + 5 s + 1 min",
    rule: approximate([...oneAndFive, { windowMs: 60_000, max: 30_000 }]),
    keysPerCall: 1,
  },
  {
    name: "approximate 1 s + 5 s + 1 min",
    rule: approximate([...oneAndFive, { windowMs: 60_000, max: 30_000 }]),
    keysPerCall: 20,
  },
  {
    name: "strict 1 s + 5 s (lease 50 ms)",
    rule: { ...approximate(oneAndFive), mode: "strict", leaseMs: 50 },
    keysPerCall: 1,
  },
  {
    name: "strict 1 s + 5 s (lease 50 ms)",
    rule: { ...approximate(oneAndFive), mode: "strict", leaseMs: 50 },
    keysPerCall: 20,
  },
];

function approximate(limits: QuotaRule["limits"]): QuotaRule {
  return { mode: "approximate", leaseMs: 1000, fallback: "share", slotGroups: 1, limits };
}

/**
 * On the given primaries: µs and calls of FCALL, EVAL and EVALSHA (commandstats: time inside the script, which
 * a busy machine stretches when it preempts Redis) and the processes' CPU time in µs (INFO cpu: what
 * Redis really spent, parsing and replies included).
 */
async function scriptStats(primaries: Redis[]): Promise<{ usec: number; calls: number; cpu: number }> {
  let usec = 0;
  let calls = 0;
  let cpu = 0;
  for (const node of primaries) {
    const info = await node.info("all");
    for (const match of info.matchAll(/^cmdstat_(?:eval|evalsha|fcall):calls=(\d+),usec=(\d+),/gm)) {
      calls += Number(match[1]);
      usec += Number(match[2]);
    }
    for (const match of info.matchAll(/^used_cpu_(?:user|sys):([\d.]+)/gm)) cpu += Number(match[1]) * 1e6;
  }
  return { usec, calls, cpu };
}

/**
 * One round's requests: each instance syncs every key of the shape (usage 3 per key; strict: 3 tokens
 * wanted and, from the third round, one refunded).
 */
export function syncRound(shape: SyncShape, round: number, now: number, instances = 4): SyncRequest[] {
  const keys = Array.from({ length: shape.keysPerCall }, (_, i) => `tenant-${i}`);
  return Array.from({ length: instances }, (_, i) => ({
    instanceId: `i${i}`,
    rule: "api",
    group: 0,
    seq: round,
    configVersion: "v1",
    entries: keys.map((key) => ({
      key,
      usage: shape.rule.mode === "approximate" ? [[now - 10, 3]] : [],
      refunds: shape.rule.mode === "strict" && round > 2 ? [[now - 2 * SYNC_EVERY_MS, 1]] : [],
      offered: 3,
      want: shape.rule.mode === "strict" ? 3 : 0,
    })),
  }));
}

/**
 * `instances` instances each sync every key of one slot group every 50 ms (simulated time, so every call
 * moves the rings on by one bucket, as in production), for `rounds` rounds. The script's time is the store's
 * clock (lua/quota-sync/store-now.lua), so the calls run the test build, whose store clock is set to each
 * round's time (one SET per round, outside the script; inside it, one GET more than the service's build).
 */
async function measureShape(cluster: TollgateCluster, shape: SyncShape, rounds: number, instances = 4) {
  const namespace = `bench-q-${Math.random().toString(36).slice(2, 8)}`;
  const store = new RedisQuotaStore(cluster, namespace, 2_000, testClockQuotaLibrary);
  await store.publish("api", shape.rule, "v1", 1, Date.now());
  const primaries = cluster.nodes("master");
  const before = await scriptStats(primaries);
  for (let round = 1; round <= rounds; round++) {
    const now = T0 + round * SYNC_EVERY_MS;
    await setStoreClock(cluster, namespace, "api", 0, now);
    await Promise.all(syncRound(shape, round, now, instances).map((request) => store.sync(request, now)));
  }
  const after = await scriptStats(primaries);
  const calls = after.calls - before.calls;
  const usecPerCall = (after.usec - before.usec) / calls;
  const cpuPerCall = (after.cpu - before.cpu) / calls;
  return { usecPerCall, usecPerKey: usecPerCall / shape.keysPerCall, cpuPerKey: cpuPerCall / shape.keysPerCall };
}

/** The floor in the same run: a script that returns at once, called the same way. */
async function noopStats(cluster: TollgateCluster, calls: number): Promise<number> {
  cluster.defineCommand("benchNoop", { lua: "return 1", numberOfKeys: 1 });
  const noop = (cluster as unknown as { benchNoop: (key: string) => Promise<unknown> }).benchNoop.bind(cluster);
  const primaries = cluster.nodes("master");
  await noop("{bench}");
  const before = await scriptStats(primaries);
  for (let i = 0; i < calls; i += 4) await Promise.all([0, 1, 2, 3].map(() => noop("{bench}")));
  const after = await scriptStats(primaries);
  return (after.usec - before.usec) / (after.calls - before.calls);
}

/**
 * The table of every shape, and the headline figure: µs of script time per key updated, approximate
 * 1 s + 5 s with 20 keys per call (how the SDK syncs a slot group's keys: many per call).
 */
export async function runQuotaSyncCpu(
  cluster: TollgateCluster,
  rounds = 500,
): Promise<{ lines: string[]; perKeyUs: number }> {
  let perKeyUs = Number.NaN;
  const lines = [
    "| Rule | Keys per call | Script time per call (commandstats) | **per key updated** | Redis process CPU per key |",
    "|---|---|---|---|---|",
  ];
  for (const shape of SYNC_SHAPES) {
    const { usecPerCall, usecPerKey, cpuPerKey } = await measureShape(cluster, shape, rounds);
    if (shape === SYNC_SHAPES[1]) perKeyUs = usecPerKey;
    lines.push(
      `| ${shape.name} | ${shape.keysPerCall} | ${usecPerCall.toFixed(1)} µs | **${usecPerKey.toFixed(1)} µs** | ${cpuPerKey.toFixed(1)} µs |`,
    );
  }
  lines.push(
    `| floor: a script that returns at once | — | ${(await noopStats(cluster, rounds * 4)).toFixed(1)} µs | — | — |`,
  );
  return { lines, perKeyUs };
}

if (isMain(import.meta)) {
  const base = Number(process.env.REDIS_CLUSTER_BASE_PORT ?? 7000);
  const cluster = createRedisCluster({ nodes: [0, 1, 2].map((i) => ({ host: "127.0.0.1", port: base + i })) });
  try {
    console.log((await runQuotaSyncCpu(cluster, Number(process.env.ROUNDS ?? 500))).lines.join("\n"));
  } finally {
    await cluster.quit();
  }
}
