// The `express` front of a chaos instance: the SDK behind real HTTP, as a service runs it. An Express server
// on a loopback port the OS picks, `expressQuotas` on every request, and autocannon in a process of its own
// offering the instance's rate; each answer is recorded when it is sent (200: admitted, 429: denied).
import { execFile } from "node:child_process";
import type { AddressInfo } from "node:net";
import { promisify } from "node:util";
import express from "express";
import type { Quotas } from "../../sdk/src/index.ts";
import { expressQuotas } from "../../sdk/src/middleware/express.ts";

const execFileAsync = promisify(execFile);
/** Connections autocannon keeps open: enough that a request waiting for a sync never holds the rate back. */
const CONNECTIONS = 16;

export interface ExpressLoad {
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
  app.use((_request, response, next) => {
    response.on("finish", () => {
      if (response.statusCode === 200 || response.statusCode === 429) load.record(response.statusCode === 200);
    });
    next();
  });
  app.use(expressQuotas(quotas, { rule: load.rule, key: () => load.key }));
  app.get("/", (_request, response) => {
    response.send("ok");
  });
  const server = app.listen(0, "127.0.0.1");
  await new Promise<void>((resolve) => server.once("listening", () => resolve()));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, load.from - load.now())));
  const seconds = Math.max(1, Math.round((load.to - load.now()) / 1000));
  try {
    await execFileAsync(
      "node_modules/.bin/autocannon",
      [
        "-j",
        "-c",
        String(CONNECTIONS),
        "-R",
        String(Math.round(load.perSecond)),
        "-d",
        String(seconds),
        `http://127.0.0.1:${port}/`,
      ],
      { timeout: (seconds + 30) * 1000, maxBuffer: 16 * 1024 * 1024 },
    ).catch(() => undefined);
  } finally {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
