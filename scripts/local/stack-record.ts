// `.local/local-stack.json`: which process runs the local stack and whether it started the Redis Cluster,
// so that a stack killed without its cleanup (SIGKILL) is recognised, by the CLI and by the next start.
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { stopCluster } from "../redis-cluster.ts";
import { ENDPOINTS_FILE } from "./endpoints.ts";

export const STACK_RECORD_FILE = ".local/local-stack.json";

export interface StackRecord {
  pid: number;
  /** The cluster's base port, when this stack started it (and so must stop it). */
  startedRedisBasePort?: number;
}

export function writeStackRecord(record: StackRecord): void {
  mkdirSync(dirname(STACK_RECORD_FILE), { recursive: true });
  writeFileSync(STACK_RECORD_FILE, `${JSON.stringify(record)}\n`);
}

export function readStackRecord(): StackRecord | undefined {
  if (!existsSync(STACK_RECORD_FILE)) return undefined;
  return JSON.parse(readFileSync(STACK_RECORD_FILE, "utf8")) as StackRecord;
}

/** Removes the record and the endpoints file: nothing says a stack runs when none does. */
export function removeStackFiles(): void {
  rmSync(ENDPOINTS_FILE, { force: true });
  rmSync(STACK_RECORD_FILE, { force: true });
}

export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists but belongs to someone else
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Cleans up after a stack that died without stopping (its process is gone but its record is here): stops the
 * Redis Cluster it had started, by the pids the cluster script recorded, and removes its files. Returns what
 * it did, for the log; a live stack's files are left alone.
 */
export async function cleanUpAbandonedStack(): Promise<string | undefined> {
  const record = readStackRecord();
  if (!record || isRunning(record.pid)) return undefined;
  if (record.startedRedisBasePort !== undefined) await stopCluster({ basePort: record.startedRedisBasePort });
  removeStackFiles();
  return record.startedRedisBasePort === undefined
    ? `removed the files of a local stack that was killed (pid ${record.pid})`
    : `stopped the Redis Cluster on port ${record.startedRedisBasePort}+ that a killed local stack (pid ${record.pid}) left running`;
}
