// The harness's own Redis Cluster and what nemeses do to its nodes: kill -9 and restart, CLIENT PAUSE,
// FLUSHALL, SIGSTOP / SIGCONT of every node. It acts only on the pids scripts/redis-cluster.ts recorded.
// The tenants' ACL users are set on every node, and again on a node restarted (ACL users live per node, in
// memory: ElastiCache keeps its RBAC users across a node replacement, a restarted redis-server does not).
import { execFile, execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
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

  /** The cluster id of the node on `port` (CLUSTER MYID). */
  async idOf(port: number): Promise<string> {
    return (await this.cli(port, "cluster", "myid")).trim();
  }

  /**
   * Resolves true once a live primary's view shows node `id` serving no slot (its replica took over), false
   * if it still serves some after `timeoutMs`.
   */
  async waitTakenOver(id: string, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      for (const port of await this.primaries()) {
        const view = await this.cli(port, "cluster", "nodes").catch(() => "");
        const line = view.split("\n").find((l) => l.startsWith(`${id} `));
        // id addr flags master ping pong epoch link slot...: no slot field left once another serves them
        if (line !== undefined && line.trim().split(" ").length <= 8) return true;
      }
      if (Date.now() > deadline) return false;
      await sleep(100);
    }
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

  /** kill -9 of a node; returns once the process is gone, so a restart finds its port free. */
  kill9(port: number): void {
    const pid = this.pidOf(port);
    if (pid === undefined || !signal(pid, "SIGKILL")) return;
    const pause = new Int32Array(new SharedArrayBuffer(4));
    for (let i = 0; i < 200 && signal(pid, 0); i++) Atomics.wait(pause, 0, 0, 10);
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

  /** Keys matching `pattern` on `port` (SCAN, a small harness data set). */
  async keysOn(port: number, pattern: string): Promise<string[]> {
    const out = await this.cli(port, "--scan", "--pattern", pattern);
    return out.split("\n").filter((line) => line !== "");
  }

  /** The primary holding the most keys matching `pattern`: the one a product's load lands on most. */
  async busiestPrimary(pattern: string): Promise<number> {
    let best: { port: number; keys: number } | undefined;
    for (const port of await this.primaries()) {
      const keys = (await this.keysOn(port, pattern)).length;
      if (!best || keys > best.keys) best = { port, keys };
    }
    if (!best) throw new Error("no primary answers");
    return best.port;
  }

  /**
   * Moves every slot holding keys matching `pattern` (and `chooses`) to the next primary, as `redis-cli --cluster reshard`
   * does it: the slot IMPORTING on the target and MIGRATING on the source, its keys MIGRATEd in batches (the
   * slot answers ASK meanwhile), then SETSLOT NODE on every primary. `pauseMs` between the steps keeps each
   * slot in its migrating state long enough for the load to meet it. Returns the slots moved.
   */
  async migrateSlotsOf(
    pattern: string,
    pauseMs: number,
    chooses: (key: string) => boolean = () => true,
  ): Promise<number> {
    const primaries = await this.primaries();
    const ids = new Map<number, string>();
    for (const port of primaries) ids.set(port, (await this.cli(port, "cluster", "myid")).trim());
    // every slot in use and its primary, found before anything moves (a slot moves once)
    const plan: { slot: number; source: number; target: number }[] = [];
    for (const [i, source] of primaries.entries()) {
      const target = primaries[(i + 1) % primaries.length] as number;
      const slots = new Set<number>();
      for (const key of (await this.keysOn(source, pattern)).filter(chooses))
        slots.add(Number((await this.cli(source, "cluster", "keyslot", key)).trim()));
      for (const slot of slots) plan.push({ slot, source, target });
    }
    let moved = 0;
    for (const { slot, source, target } of plan) {
      await this.cli(target, "cluster", "setslot", String(slot), "importing", ids.get(source) as string);
      await this.cli(source, "cluster", "setslot", String(slot), "migrating", ids.get(target) as string);
      await sleep(pauseMs);
      for (;;) {
        const keys = (await this.cli(source, "cluster", "getkeysinslot", String(slot), "100"))
          .split("\n")
          .filter((line) => line !== "");
        if (keys.length === 0) break;
        await this.cli(source, "migrate", HOST, String(target), "", "0", "5000", "keys", ...keys);
      }
      for (const port of [target, source, ...primaries.filter((p) => p !== target && p !== source)])
        await this.cli(port, "cluster", "setslot", String(slot), "node", ids.get(target) as string);
      moved++;
    }
    return moved;
  }

  /** SIGSTOP (or SIGCONT) to every node: the whole cluster stops answering, its data kept. */
  signalAll(sig: "SIGSTOP" | "SIGCONT"): void {
    for (const port of this.ports) {
      const pid = this.pidOf(port);
      if (pid !== undefined) signal(pid, sig);
    }
  }
}

/** Sends `sig` to `pid`; false when no such process is left (a node killed and not restarted). */
function signal(pid: number, sig: NodeJS.Signals | 0): boolean {
  try {
    process.kill(pid, sig);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ESRCH") return false;
    throw error;
  }
}
