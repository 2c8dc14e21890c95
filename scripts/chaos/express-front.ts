// The `express` front of a chaos instance: the SDK behind real HTTP, as a service runs it. An Express server
// on a loopback port the OS picks, `expressQuotas` on every request, and autocannon in a process of its own
// offering the instance's rate (autocannon's own pacing: each connection sends its share of a second's
// requests, then waits for the next second); every request is recorded when the middleware decides it.
import { execFile, fork } from "node:child_process";
import type { AddressInfo } from "node:net";
import { promisify } from "node:util";
import express from "express";
import type { Quotas } from "../../sdk/src/index.ts";
import { expressQuotas } from "../../sdk/src/middleware/express.ts";
import type { HttpLoadConfig } from "./http-load-main.ts";

const execFileAsync = promisify(execFile);
const LOAD_ENTRY = new URL("./http-load-main.ts", import.meta.url).pathname;
/** Connections autocannon keeps open: enough that a request waiting for a sync never holds the rate back. */
const CONNECTIONS = 16;

export interface ExpressLoad {
  /**
   * `autocannon`: its own pacing (each connection sends its share of a second's requests at once, then waits
   * for the next second); `poisson`: the seeded open-loop arrivals of the direct front, sent by a process of
   * our own (http-load-main.ts).
   */
  pacing: "autocannon" | "poisson";
  /** The reference clock's origin and the arrivals' seed (poisson). */
  origin: string;
  seed: number;
  rule: string;
  key: string;
  /** Reference ms: start and end of the load. */
  from: number;
  to: number;
  perSecond: number;
  now: () => number;
  record: (allowed: boolean) => void;
}

/** Serves `quotas` over HTTP and offers it `perSecond` from `from` to `to`; resolves when the load ended. */
export async function expressFront(quotas: Quotas, load: ExpressLoad): Promise<void> {
  const app = express();
  // recorded when decided, not when the response is sent (a later time, by however long the event loop took,
  // would move admissions into windows they were not decided in): a denial when the middleware sets its 429,
  // an admission when the handler after it runs
  app.use((_request, response, next) => {
    const status = response.status.bind(response);
    response.status = (code: number) => {
      if (code === 429) load.record(false);
      return status(code);
    };
    next();
  });
  app.use(expressQuotas(quotas, { rule: load.rule, key: () => load.key }));
  app.get("/", (_request, response) => {
    load.record(true);
    response.send("ok");
  });
  const server = app.listen(0, "127.0.0.1");
  await new Promise<void>((resolve) => server.once("listening", () => resolve()));
  const { port } = server.address() as AddressInfo;
  try {
    if (load.pacing === "poisson") await poissonLoad(port, load);
    else await autocannonLoad(port, load);
  } finally {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

async function autocannonLoad(port: number, load: ExpressLoad): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, load.from - load.now())));
  const seconds = Math.max(1, Math.round((load.to - load.now()) / 1000));
  const rate = String(Math.round(load.perSecond));
  await execFileAsync(
    "node_modules/.bin/autocannon",
    ["-j", "-c", String(CONNECTIONS), "-R", rate, "-d", String(seconds), `http://127.0.0.1:${port}/`],
    { timeout: (seconds + 30) * 1000, maxBuffer: 16 * 1024 * 1024 },
  ).catch(() => undefined);
}

async function poissonLoad(port: number, load: ExpressLoad): Promise<void> {
  const config: HttpLoadConfig = {
    port,
    origin: load.origin,
    from: load.from,
    to: load.to,
    perSecond: load.perSecond,
    seed: load.seed,
  };
  const child = fork(LOAD_ENTRY, [JSON.stringify(config)], { execArgv: ["--import", "tsx"], stdio: "ignore" });
  await new Promise<void>((resolve) => child.once("exit", () => resolve()));
}
