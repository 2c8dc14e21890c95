// The bench's Redis primaries scheduled ahead of everything else on the machine, as Redis runs on a node of
// its own in production: on this 2-core machine the load generator (this Node process, its worker threads,
// autocannon) and the replicas would otherwise preempt a primary in the middle of a script, and a script's
// wall time (SLOWLOG, INFO commandstats) would measure the machine's scheduler rather than the script.
//
//   BENCH_REDIS_SCHEDULING: fifo (default: SCHED_FIFO priority 10 for the primaries, through chrt) | normal
import { execFileSync } from "node:child_process";
import { Redis } from "ioredis";

export type Scheduling = "fifo" | "normal";

export const SCHEDULING: Scheduling = process.env.BENCH_REDIS_SCHEDULING === "normal" ? "normal" : "fifo";

const FIFO_PRIORITY = 10;

/**
 * Raises every primary among `ports` to SCHED_FIFO (unless BENCH_REDIS_SCHEDULING=normal) and returns what
 * the run's tables should say about it. Falls back to normal scheduling, and says so, where the process may
 * not raise priorities (not root, no chrt): the figures are then the shared machine's.
 */
export async function schedulePrimaries(host: string, ports: number[]): Promise<string> {
  if (SCHEDULING === "normal") return "Redis primaries at normal priority (BENCH_REDIS_SCHEDULING=normal)";
  const raised: number[] = [];
  try {
    for (const port of ports) {
      const { role, pid } = await serverOf(host, port);
      if (role !== "master") continue;
      execFileSync("chrt", ["-f", "-p", String(FIFO_PRIORITY), pid], { stdio: "pipe" });
      raised.push(port);
    }
  } catch (error) {
    for (const port of raised) await setNormal(host, port);
    const reason = error instanceof Error ? error.message.split("\n")[0] : String(error);
    return `Redis primaries at normal priority: raising them failed (${reason})`;
  }
  return (
    `Redis primaries (ports ${raised.join(", ")}) at real-time priority (SCHED_FIFO ${FIFO_PRIORITY}), as on nodes ` +
    "of their own; replicas and the load generator at normal priority"
  );
}

async function serverOf(host: string, port: number): Promise<{ role: unknown; pid: string }> {
  const redis = new Redis({ host, port, lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await redis.connect();
    const [role] = (await redis.call("ROLE")) as unknown[];
    const pid = /process_id:(\d+)/.exec(await redis.info("server"))?.[1];
    if (pid === undefined) throw new Error(`no process_id in INFO server of port ${port}`);
    return { role, pid };
  } finally {
    redis.disconnect();
  }
}

async function setNormal(host: string, port: number): Promise<void> {
  try {
    execFileSync("chrt", ["-o", "-p", "0", (await serverOf(host, port)).pid], { stdio: "pipe" });
  } catch {
    // left as it is: the line returned reports that raising failed
  }
}

/**
 * Every primary among `ports` at `scheduling` (fifo: SCHED_FIFO, as schedulePrimaries; normal: SCHED_OTHER),
 * for a section that compares the two in one run; what the row should say of it. Where raising fails, the
 * primaries stay at normal priority and the text says so.
 */
export async function schedulePrimariesAs(host: string, ports: number[], scheduling: Scheduling): Promise<string> {
  if (scheduling === "fifo") {
    const said = await schedulePrimaries(host, ports);
    return said.includes("real-time") ? `real-time (SCHED_FIFO ${FIFO_PRIORITY})` : "normal (raising failed)";
  }
  for (const port of ports) {
    const { role } = await serverOf(host, port);
    if (role === "master") await setNormal(host, port);
  }
  return "normal (SCHED_OTHER, beside the load)";
}
