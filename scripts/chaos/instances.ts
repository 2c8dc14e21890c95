// The SDK instances of a run as child processes (instance-main.ts): forked with the tsx loader, one clock
// each (libfaketime for the one a clock nemesis moves), their decisions and sync figures gathered here.
import { type ChildProcess, fork } from "node:child_process";
import { writeFileSync } from "node:fs";
import type { Decision } from "./contract.ts";
import type { InstanceConfig, InstanceMessage, StartMessage } from "./messages.ts";

const LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
const ENTRY = new URL("./instance-main.ts", import.meta.url).pathname;

/** libfaketime's offset file format: seconds, signed ("+0.5", "-1.2"). */
export function faketimeOffset(ms: number): string {
  return `${ms < 0 ? "-" : "+"}${(Math.abs(ms) / 1000).toFixed(3)}\n`;
}

/** The environment that runs a process under libfaketime, its wall clock offset by what `clockFile` says. */
export function faketimeEnv(clockFile: string): NodeJS.ProcessEnv {
  return {
    LD_PRELOAD: LIBFAKETIME,
    FAKETIME_TIMESTAMP_FILE: clockFile,
    // read the file on every clock call: the harness steps the clock while the process runs
    FAKETIME_NO_CACHE: "1",
    // the reference clock (CLOCK_MONOTONIC) and Node's timers keep real time
    DONT_FAKE_MONOTONIC: "1",
  };
}

export interface InstanceOptions {
  config: InstanceConfig;
  /** Run the process under libfaketime, its wall clock offset by what this file says (rewritten live). */
  clockFile?: string;
  logFile?: number;
}

export class Instance {
  readonly decisions: Decision[] = [];
  readyAt: number | undefined;
  /** When the process reported it runs (before its ready()). */
  upAt: number | undefined;
  /** Sync round trips, ms, each with when it was reported (reference ms). */
  latencies: { at: number; ms: number }[] = [];
  syncErrors = 0;
  lastError: string | undefined;
  private readonly child: ChildProcess;
  private readonly done: Promise<void>;
  private readyWaiters: (() => void)[] = [];
  private upWaiters: (() => void)[] = [];

  constructor(readonly options: InstanceOptions) {
    const { config, clockFile } = options;
    const env: NodeJS.ProcessEnv = { ...process.env, ...(clockFile ? faketimeEnv(clockFile) : {}) };
    const stdio = options.logFile === undefined ? "ignore" : options.logFile;
    this.child = fork(ENTRY, [JSON.stringify(config)], {
      execArgv: ["--import", "tsx"],
      env,
      stdio: ["ignore", stdio, stdio, "ipc"],
    });
    this.child.on("message", (message: InstanceMessage) => this.receive(message));
    this.done = new Promise((resolve) => this.child.once("exit", () => resolve()));
  }

  private receive(message: InstanceMessage): void {
    const index = this.options.config.index;
    switch (message.type) {
      case "up":
        this.upAt = message.at;
        for (const waiter of this.upWaiters) waiter();
        this.upWaiters = [];
        return;
      case "ready":
        this.readyAt = message.at;
        for (const waiter of this.readyWaiters) waiter();
        this.readyWaiters = [];
        return;
      case "decisions":
        message.at.forEach((at, i) => {
          const askedAt = message.askedAt?.[i];
          this.decisions.push({
            at,
            ...(askedAt !== undefined && askedAt < at ? { askedAt } : {}),
            instance: index,
            allowed: message.allowed[i] === 1,
            cost: 1,
          });
        });
        return;
      case "syncs":
        for (const ms of message.latencyMs) this.latencies.push({ at: message.at, ms });
        this.syncErrors += message.errors;
        if (message.lastError) this.lastError = message.lastError;
        return;
      case "done":
        return;
    }
  }

  /** Resolves when the instance's ready() did, or after `timeoutMs` (false then). */
  ready(timeoutMs: number): Promise<boolean> {
    if (this.readyAt !== undefined) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      this.readyWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  /** Resolves when the process runs (its modules loaded, before its ready()), or after `timeoutMs` (false then). */
  up(timeoutMs: number): Promise<boolean> {
    if (this.upAt !== undefined) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      this.upWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  start(message: Omit<StartMessage, "type">): void {
    this.child.send({ type: "start", ...message } satisfies StartMessage);
  }

  /** Waits for the instance to finish its load and stop, killing it after `timeoutMs`. */
  async finish(timeoutMs: number): Promise<void> {
    const timer = setTimeout(() => this.child.kill("SIGKILL"), timeoutMs);
    await this.done;
    clearTimeout(timer);
  }

  kill(): void {
    this.child.kill("SIGKILL");
  }
}

/** Writes the clock file an instance under libfaketime reads (its wall clock = real + `ms`). */
export function setClockOffset(file: string, ms: number): void {
  writeFileSync(file, faketimeOffset(ms));
}
