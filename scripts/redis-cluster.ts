// A local Redis Cluster on loopback, of Debian's redis-server (Redis 7.0) or valkey-server (Valkey 8.0):
// primaries + replicas in cluster mode, for tests, the local stack and the bench. It records the pids it
// started and stops only those.
//
//   tsx scripts/redis-cluster.ts start|stop|status
//   (env REDIS_CLUSTER_BASE_PORT, default 7000; TOLLGATE_ENGINE=redis|valkey, default redis)
import { execFile, execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { isMain } from "./is-main.ts";

const execFileAsync = promisify(execFile);

/** The engines the suite runs on: Debian's Redis 7.0 and Valkey 8.0 (bookworm-backports). */
export const ENGINES = ["redis", "valkey"] as const;
export type Engine = (typeof ENGINES)[number];

/** The engine of this process's clusters: TOLLGATE_ENGINE, or Redis. */
export function engineOf(env: NodeJS.ProcessEnv = process.env): Engine {
  const engine = env.TOLLGATE_ENGINE ?? "redis";
  if (!(ENGINES as readonly string[]).includes(engine)) {
    throw new Error(`TOLLGATE_ENGINE: expected one of ${ENGINES.join(", ")}, got ${JSON.stringify(engine)}`);
  }
  return engine as Engine;
}

/** The server and CLI binaries of an engine. */
export function binariesOf(engine: Engine): { server: string; cli: string } {
  return engine === "valkey"
    ? { server: "valkey-server", cli: "valkey-cli" }
    : { server: "redis-server", cli: "redis-cli" };
}

export interface LocalClusterOptions {
  /** Default: engineOf(process.env). */
  engine?: Engine;
  host?: string;
  basePort?: number;
  primaries?: number;
  replicasPerPrimary?: number;
  /** Where configs, pidfiles and logs go. */
  dir?: string;
  /** How long to wait for `cluster_state:ok` and replica sync. */
  readyTimeoutMs?: number;
}

export interface LocalCluster {
  host: string;
  ports: number[];
  /** The startup nodes, `host:port`, primaries and replicas. */
  nodes: string[];
}

function settings(options: LocalClusterOptions = {}) {
  const host = options.host ?? "127.0.0.1";
  const basePort = options.basePort ?? Number(process.env.REDIS_CLUSTER_BASE_PORT ?? 7000);
  const primaries = options.primaries ?? 3;
  const replicas = options.replicasPerPrimary ?? 1;
  const count = primaries * (1 + replicas);
  const ports = Array.from({ length: count }, (_, i) => basePort + i);
  const dir = resolve(options.dir ?? join(".local", "redis-cluster", String(basePort)));
  const engine = options.engine ?? engineOf();
  return { engine, host, ports, primaries, replicas, dir, readyTimeoutMs: options.readyTimeoutMs ?? 30_000 };
}

function describe(host: string, ports: number[]): LocalCluster {
  return { host, ports, nodes: ports.map((port) => `${host}:${port}`) };
}

function requireBinaries(engine: Engine): void {
  for (const binary of Object.values(binariesOf(engine))) {
    try {
      execFileSync("sh", ["-c", `command -v ${binary}`], { stdio: "ignore" });
    } catch {
      throw new Error(
        `${binary} is not installed. Run \`node scripts/ensure-deps.mjs\` as root (it uses apt-get), ` +
          `or install Debian's ${binariesOf(engine).server} package yourself.`,
      );
    }
  }
}

async function cli(host: string, port: number, ...args: string[]): Promise<string> {
  // either engine's CLI speaks to either server: redis-cli is there whenever the suite runs
  const { stdout } = await execFileAsync("redis-cli", ["-h", host, "-p", String(port), ...args], {
    timeout: 5_000,
  });
  return stdout;
}

function portOpen(host: string, port: number): Promise<boolean> {
  return new Promise((done) => {
    const socket = createConnection({ host, port });
    const finish = (open: boolean) => {
      socket.destroy();
      done(open);
    };
    socket.setTimeout(500, () => finish(false));
    socket.once("connect", () => finish(true));
    socket.once("error", () => finish(false));
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The engine a server is: Valkey names itself in INFO (`server_name:valkey`), Redis 7.0 does not. */
export async function engineAt(host: string, port: number): Promise<Engine> {
  return /^server_name:valkey\r?$/m.test(await cli(host, port, "info", "server")) ? "valkey" : "redis";
}

/** True when every node answers and reports `cluster_state:ok` and every replica is in sync. */
export async function isClusterReady(options: LocalClusterOptions = {}): Promise<boolean> {
  const { host, ports } = settings(options);
  for (const port of ports) {
    if (!(await portOpen(host, port))) return false;
    try {
      const info = await cli(host, port, "cluster", "info");
      if (!info.includes("cluster_state:ok")) return false;
      const replication = await cli(host, port, "info", "replication");
      // A replica that has not finished its first sync refuses to fail over (and a test that forces one
      // then turns the whole cluster to CLUSTERDOWN), so readiness includes the link being up.
      if (replication.includes("role:slave") && !replication.includes("master_link_status:up")) return false;
    } catch {
      return false;
    }
  }
  return true;
}

export async function waitForCluster(options: LocalClusterOptions = {}): Promise<void> {
  const { readyTimeoutMs } = settings(options);
  const deadline = Date.now() + readyTimeoutMs;
  while (!(await isClusterReady(options))) {
    if (Date.now() > deadline) throw new Error(`Redis Cluster not ready within ${readyTimeoutMs} ms`);
    await sleep(200);
  }
}

function configFor(host: string, port: number, dir: string): string {
  return [
    `port ${port}`,
    `bind ${host}`,
    `dir ${dir}`,
    "daemonize yes",
    `pidfile ${join(dir, "redis.pid")}`,
    `logfile ${join(dir, "redis.log")}`,
    "cluster-enabled yes",
    "cluster-config-file nodes.conf",
    // Fast failure detection for failover tests; ElastiCache uses its own (longer) value.
    "cluster-node-timeout 2000",
    // Let a replica fail over however long its link was down: tests promote replicas on purpose.
    "cluster-replica-validity-factor 0",
    "appendonly no",
    'save ""',
    "",
  ].join("\n");
}

/**
 * Starts the cluster unless it is already up. Returns `started: false` when it found a ready cluster,
 * so a caller that did not start it does not stop it.
 */
export async function startCluster(options: LocalClusterOptions = {}): Promise<LocalCluster & { started: boolean }> {
  const { engine, host, ports, replicas, dir } = settings(options);
  if (await isClusterReady(options)) {
    const running = await engineAt(host, ports[0] as number);
    if (running !== engine) {
      throw new Error(
        `a ${running} cluster is running on ${host}:${ports[0]}, not the ${engine} one asked for (TOLLGATE_ENGINE); ` +
          "stop it or choose other ports with REDIS_CLUSTER_BASE_PORT",
      );
    }
    return { ...describe(host, ports), started: false };
  }
  requireBinaries(engine);
  for (const port of ports) {
    if (await portOpen(host, port)) {
      throw new Error(
        `port ${port} on ${host} is in use by something that is not a ready Tollgate cluster; ` +
          "stop it or choose other ports with REDIS_CLUSTER_BASE_PORT",
      );
    }
  }
  for (const port of ports) {
    const nodeDir = join(dir, String(port));
    rmSync(nodeDir, { recursive: true, force: true });
    mkdirSync(nodeDir, { recursive: true });
    const conf = join(nodeDir, "redis.conf");
    writeFileSync(conf, configFor(host, port, nodeDir));
    execFileSync(binariesOf(engine).server, [conf], { stdio: "ignore" });
  }
  try {
    for (const port of ports) {
      const deadline = Date.now() + 10_000;
      while (!(await portOpen(host, port))) {
        if (Date.now() > deadline)
          throw new Error(`${binariesOf(engine).server} on port ${port} did not start; see ${dir}`);
        await sleep(50);
      }
    }
    await execFileAsync(
      "redis-cli",
      [
        "--cluster",
        "create",
        ...ports.map((port) => `${host}:${port}`),
        "--cluster-replicas",
        String(replicas),
        "--cluster-yes",
      ],
      { timeout: 30_000 },
    );
    await waitForCluster(options);
  } catch (error) {
    await stopCluster(options);
    throw error;
  }
  return { ...describe(host, ports), started: true };
}

/** Stops the servers whose pidfiles this script wrote, and nothing else. */
export async function stopCluster(options: LocalClusterOptions = {}): Promise<void> {
  const { ports, dir } = settings(options);
  const pids: number[] = [];
  for (const port of ports) {
    const pidfile = join(dir, String(port), "redis.pid");
    if (!existsSync(pidfile)) continue;
    const pid = Number(readFileSync(pidfile, "utf8").trim());
    if (!Number.isInteger(pid) || pid <= 0) continue;
    try {
      process.kill(pid, "SIGTERM");
      pids.push(pid);
    } catch {
      // already gone
    }
  }
  const deadline = Date.now() + 10_000;
  for (const pid of pids) {
    while (alive(pid) && Date.now() < deadline) await sleep(50);
    if (alive(pid)) process.kill(pid, "SIGKILL");
  }
  rmSync(dir, { recursive: true, force: true });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function main(command: string | undefined): Promise<void> {
  switch (command) {
    case "start": {
      const cluster = await startCluster();
      console.log(`${cluster.started ? "started" : "already running"}: ${cluster.nodes.join(" ")}`);
      return;
    }
    case "stop":
      await stopCluster();
      console.log("stopped");
      return;
    case "status": {
      const { host, ports } = settings();
      console.log((await isClusterReady()) ? `ready (${await engineAt(host, ports[0] as number)})` : "not ready");
      return;
    }
    default:
      console.error("usage: redis-cluster.ts start|stop|status");
      process.exitCode = 2;
  }
}

if (isMain(import.meta)) {
  main(process.argv[2]).catch((error: unknown) => {
    console.error(error instanceof Error ? error.message : error);
    process.exitCode = 1;
  });
}
