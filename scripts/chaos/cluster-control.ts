// The harness's own Redis Cluster and what nemeses do to its nodes: kill -9 and restart, CLIENT PAUSE,
// FLUSHALL, SIGSTOP / SIGCONT of every node. It acts only on the pids scripts/redis-cluster.ts recorded.
import { execFile, execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { binariesOf, type Engine, startCluster, stopCluster, waitForCluster } from "../redis-cluster.ts";

const execFileAsync = promisify(execFile);
const HOST = "127.0.0.1";

export class ClusterControl {
  readonly ports: number[];
  readonly nodes: string[];
  private startedHere = false;

  constructor(
    readonly basePort: number,
    readonly engine: Engine,
  ) {
    this.ports = Array.from({ length: 6 }, (_, i) => basePort + i);
    this.nodes = this.ports.map((port) => `${HOST}:${port}`);
  }

  async start(): Promise<void> {
    const cluster = await startCluster({ basePort: this.basePort, engine: this.engine });
    this.startedHere = cluster.started;
  }

  /** Stops the cluster if this harness started it. */
  async stop(): Promise<void> {
    if (this.startedHere) await stopCluster({ basePort: this.basePort });
  }

  waitReady(timeoutMs = 60_000): Promise<void> {
    return waitForCluster({ basePort: this.basePort, readyTimeoutMs: timeoutMs });
  }

  private dir(port: number): string {
    return join(resolve(".local", "redis-cluster", String(this.basePort)), String(port));
  }

  pidOf(port: number): number | undefined {
    const file = join(this.dir(port), "redis.pid");
    if (!existsSync(file)) return undefined;
    const pid = Number(readFileSync(file, "utf8").trim());
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  }

  async cli(port: number, ...args: string[]): Promise<string> {
    const { stdout } = await execFileAsync("redis-cli", ["-h", HOST, "-p", String(port), ...args], { timeout: 5_000 });
    return stdout;
  }

  async primaries(): Promise<number[]> {
    const found: number[] = [];
    for (const port of this.ports) {
      const role = await this.cli(port, "role").catch(() => "");
      if (role.startsWith("master")) found.push(port);
    }
    return found;
  }

  /** The primary serving `key`'s slot: the one that answers for it rather than redirecting (MOVED). */
  async primaryOf(key: string): Promise<number> {
    for (const port of await this.primaries()) {
      const reply = (await this.cli(port, "exists", key).catch(() => "")).trim();
      if (reply === "0" || reply === "1") return port;
    }
    throw new Error(`no primary serves ${key}`);
  }

  kill9(port: number): void {
    const pid = this.pidOf(port);
    if (pid !== undefined) process.kill(pid, "SIGKILL");
  }

  /** Starts a killed node again from its config (no persistence: it comes back empty). */
  restart(port: number): void {
    execFileSync(binariesOf(this.engine).server, [join(this.dir(port), "redis.conf")], { stdio: "ignore" });
  }

  async pause(port: number, ms: number): Promise<void> {
    await this.cli(port, "client", "pause", String(ms), "all");
  }

  async flushAll(): Promise<void> {
    for (const port of await this.primaries()) await this.cli(port, "flushall");
  }

  /** SIGSTOP (or SIGCONT) to every node: the whole cluster stops answering, its data kept. */
  signalAll(signal: "SIGSTOP" | "SIGCONT"): void {
    for (const port of this.ports) {
      const pid = this.pidOf(port);
      if (pid !== undefined) process.kill(pid, signal);
    }
  }
}
