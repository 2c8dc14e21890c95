// `npm run local` as a user runs it, in a scratch directory with its own ports: the emulator listens on
// loopback only, a SIGKILLed stack leaves files the CLI refuses with a clear message and a cluster the next
// start finds and stops, and Ctrl-C removes everything.
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { connect } from "node:net";
import { networkInterfaces, tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, expect, it } from "vitest";

const root = join(import.meta.dirname, "../../..");
// node itself with tsx's loader, not the tsx binary: that would wrap the stack in a second process, and the
// SIGKILL below must reach the stack
const node = [
  process.execPath,
  "--import",
  pathToFileURL(join(root, "node_modules/tsx/dist/loader.mjs")).href,
] as const;
const base = Number(process.env.REDIS_CLUSTER_BASE_PORT ?? 7000);
const redisBasePort = base + 30;
const awsPort = base + 50;
const cwd = mkdtempSync(join(tmpdir(), "tollgate-local-"));
const env = {
  ...process.env,
  REDIS_CLUSTER_BASE_PORT: String(redisBasePort),
  LOCAL_AWS_PORT: String(awsPort),
  LOCAL_FUNCTION_URL_PORT: String(base + 51),
  LOCAL_QUOTA_SYNC_URL_PORT: String(base + 52),
};
const started: ChildProcess[] = [];

/** Starts `npm run local`'s script in the scratch directory; resolves once it says it is up. */
async function startStack(): Promise<{ child: ChildProcess; stderr: () => string }> {
  const child = spawn(node[0], [...node.slice(1), join(root, "scripts/local-stack.ts")], {
    cwd,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  started.push(child);
  let stdout = "";
  let stderr = "";
  child.stderr?.on("data", (chunk) => {
    stderr += chunk;
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on("data", (chunk) => {
      stdout += chunk;
      if (stdout.includes("local stack up")) resolve();
    });
    child.once("exit", (code) => reject(new Error(`local stack exited ${code}: ${stderr}`)));
  });
  return { child, stderr: () => stderr };
}

const exited = (child: ChildProcess) =>
  new Promise<number | null>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve(child.exitCode);
    else child.once("exit", (code) => resolve(code));
  });
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
const redisPids = () => {
  const dir = join(cwd, ".local/redis-cluster", String(redisBasePort));
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((port) => existsSync(join(dir, port, "redis.pid")))
    .map((port) => Number(readFileSync(join(dir, port, "redis.pid"), "utf8")));
};
/** Connects to host:port: "connected" or the error code. */
const reach = (host: string, port: number) =>
  new Promise<string>((resolve) => {
    const socket = connect({ host, port });
    socket.once("connect", () => {
      socket.destroy();
      resolve("connected");
    });
    socket.once("error", (error: NodeJS.ErrnoException) => resolve(error.code ?? "error"));
  });
const cli = (args: string[]) =>
  new Promise<{ code: number | null; stderr: string }>((resolve) => {
    execFile(
      node[0],
      [...node.slice(1), join(root, "scripts/cli.ts"), ...args],
      { cwd, env },
      (error, _stdout, stderr) => resolve({ code: error ? (error.code as number) : 0, stderr }),
    );
  });

afterAll(async () => {
  for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  for (const pid of redisPids()) if (alive(pid)) process.kill(pid);
  rmSync(cwd, { recursive: true, force: true });
});

it("listens on loopback only, and a killed stack is refused by the CLI and cleaned up by the next start", async () => {
  const first = await startStack();
  expect(await reach("127.0.0.1", awsPort)).toBe("connected");
  const external = Object.values(networkInterfaces())
    .flat()
    .find((address) => address && address.family === "IPv4" && !address.internal);
  // fauxqs's own start listens on 0.0.0.0: reachable from outside unless bound as the stack binds it
  if (external) expect(await reach(external.address, awsPort)).toBe("ECONNREFUSED");

  const record = JSON.parse(readFileSync(join(cwd, ".local/local-stack.json"), "utf8"));
  expect(record).toEqual({ pid: first.child.pid, startedRedisBasePort: redisBasePort });
  const abandoned = redisPids();
  expect(abandoned).toHaveLength(6);

  first.child.kill("SIGKILL");
  await exited(first.child);
  // what SIGKILL leaves: the endpoints file and six servers nobody will stop
  expect(existsSync(join(cwd, ".local/endpoints.json"))).toBe(true);
  expect(abandoned.every(alive)).toBe(true);
  const refused = await cli(["delivery", "tail", "--local", "--max", "1"]);
  expect(refused.code).toBe(1);
  expect(refused.stderr).toContain(`(pid ${first.child.pid}) is not running: is \`npm run local\` running?`);

  const second = await startStack();
  expect(second.stderr()).toContain(`stopped the Redis Cluster on port ${redisBasePort}+ that a killed local stack`);
  expect(abandoned.some(alive)).toBe(false);
  const running = redisPids();
  expect(running.every(alive)).toBe(true);

  second.child.kill("SIGINT");
  expect(await exited(second.child)).toBe(0);
  expect(existsSync(join(cwd, ".local/endpoints.json"))).toBe(false);
  expect(existsSync(join(cwd, ".local/local-stack.json"))).toBe(false);
  expect(running.some(alive)).toBe(false);
  const gone = await cli(["delivery", "tail", "--local"]);
  expect(gone.code).toBe(1);
  expect(gone.stderr).toContain("endpoints.json not found: is `npm run local` running?");
}, 180_000);
