// The harness's own Redis Cluster and what nemeses do to its nodes: kill -9 and restart, CLIENT PAUSE,
// FLUSHALL, SIGSTOP / SIGCONT of every node. It acts only on the pids scripts/redis-cluster.ts recorded.
// The tenants' ACL users are set on every node, and again on a node restarted (ACL users live per node, in
// memory: ElastiCache keeps its RBAC users across a node replacement, a restarted redis-server does not).
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
  /** `ACL SETUSER ...` of each tenant user, applied to every node and to each node restarted. */
  private users: readonly string[][] = [];
  private restoringUsers: Promise<void> = Promise.resolve();

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

  /** Sets the tenants' ACL users on every node (kept for the nodes a nemesis restarts). */
  async setUsers(users: readonly string[][]): Promise<void> {
    this.users = users;
    for (const port of this.ports) for (const user of users) await this.setUser(port, user);
  }

  private async setUser(port: number, user: readonly string[]): Promise<void> {
    const reply = (await this.cli(port, ...user)).trim();
    if (reply !== "OK") throw new Error(`${user.slice(0, 3).join(" ")} on ${port}: ${reply}`);
  }

  /** Resolves once the users are back on the nodes restarted so far. */
  usersRestored(): Promise<void> {
    return this.restoringUsers;
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

  /** Every key starting with `prefix`, over the primaries (a scan for the checker, after the load). */
  async keysUnder(prefix: string): Promise<string[]> {
    const found: string[] = [];
    for (const port of await this.primaries()) {
      const reply = await this.cli(port, "--scan", "--pattern", `${prefix}*`);
      found.push(...reply.split("\n").filter((line) => line.length > 0));
    }
    return found.sort();
  }

  kill9(port: number): void {
    const pid = this.pidOf(port);
    if (pid !== undefined) process.kill(pid, "SIGKILL");
  }

  /** Starts a killed node again from its config (no persistence: it comes back empty). */
  restart(port: number): void {
    execFileSync(binariesOf(this.engine).server, [join(this.dir(port), "redis.conf")], { stdio: "ignore" });
    if (this.users.length > 0) this.restoringUsers = this.restoringUsers.then(() => this.restoreUsers(port));
  }

  /** The users again on a restarted node, once it answers (it may take a moment to listen). */
  private async restoreUsers(port: number): Promise<void> {
    for (let attempt = 0; attempt < 100; attempt++) {
      try {
        for (const user of this.users) await this.setUser(port, user);
        return;
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
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
