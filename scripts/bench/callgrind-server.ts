// A standalone redis-server under callgrind for the instruction-count probes (cap-sends, quota-sync):
// instructions are counted only inside the commands named, and read back from callgrind's dumps.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { Redis } from "ioredis";

/** Ir of the dump in `dir` whose name ends with `suffix` (callgrind's `totals:` line). */
export function dumpTotal(dir: string, suffix: string): number {
  const file = readdirSync(dir).find((name) => name.endsWith(suffix));
  if (!file) throw new Error(`no callgrind dump *${suffix} in ${dir}`);
  const match = /^totals:\s*(\d+)/m.exec(readFileSync(join(dir, file), "utf8"));
  if (!match) throw new Error(`no totals in ${file}`);
  return Number(match[1]);
}

/** Starts redis-server on `port` under callgrind, collecting only inside `commands` (C function names). */
export async function startCallgrindServer(
  port: number,
  dir: string,
  commands: readonly string[],
): Promise<{ child: ChildProcess; redis: Redis }> {
  const child = spawn(
    "valgrind",
    [
      "--tool=callgrind",
      ...commands.map((command) => `--toggle-collect=${command}`),
      `--callgrind-out-file=${join(dir, "cg.out")}`,
      "redis-server",
      "--port",
      String(port),
      "--save",
      "",
      "--appendonly",
      "no",
    ],
    { stdio: "ignore" },
  );
  for (let attempt = 0; ; attempt++) {
    if (child.exitCode !== null) throw new Error(`valgrind exited (${child.exitCode}): is port ${port} free?`);
    try {
      const pong = execFileSync("redis-cli", ["-p", String(port), "ping"], {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "ignore"],
      });
      if (pong.trim() === "PONG") break;
    } catch {
      // not listening yet
    }
    if (attempt > 150) throw new Error(`redis-server under valgrind did not start on port ${port}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  return { child, redis: new Redis({ port }) };
}

/** A function that dumps the counts so far (callgrind_control) and returns the instructions since the last dump. */
export function dumper(child: ChildProcess, dir: string): () => number {
  let dumps = 0;
  return () => {
    execFileSync("callgrind_control", [`--dump=d${++dumps}`, String(child.pid)], { stdio: "ignore" });
    return dumpTotal(dir, `.${dumps}`);
  };
}

/** Stops the server and removes its dumps (kept, and their directory printed, with KEEP_DUMPS=1). */
export async function stopCallgrindServer(child: ChildProcess, redis: Redis, dir: string, what = "callgrind dumps") {
  redis.disconnect();
  if (child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGTERM");
    await exited;
  }
  if (process.env.KEEP_DUMPS) console.error(`${what}: ${dir}`);
  else rmSync(dir, { recursive: true, force: true });
}
