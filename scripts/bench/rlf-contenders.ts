// rate-limiter-flexible as the check-api section runs it beside the check API: on plain ioredis clients of its
// own, as its users run it, behind the smallest Node HTTP server (the library's defaults, and autopipelining),
// and in as many Lambda-like execution environments as the check API, behind the same local Function URL server.
import { createServer } from "node:http";
import { Cluster } from "ioredis";
import { RateLimiterRedis } from "rate-limiter-flexible";
import { warmUp } from "../../functions/adapters/redis-warm-up.ts";
import { type functionUrlEvent, startFunctionUrlServer } from "../local/function-url-server.ts";

export type RlfClient = "plain" | "pipelined";

/** A server or client set the section stops when it ends. */
export interface Stoppable {
  stop(): Promise<void>;
}

export interface RlfContenders {
  /** URL of the minimal HTTP server of each client kind. */
  urls: Record<RlfClient, string>;
  limiters: Map<RlfClient, RateLimiterRedis>;
  /** URL of the local Function URL server over the execution environments. */
  lambdaUrl: string;
  /** One limiter per execution environment, each on its own plain client. */
  environments: RateLimiterRedis[];
}

/**
 * Starts every contender on the cluster of `redisNodes`, `environments` execution environments for the Lambda
 * one; each server is added to `servers` as it starts, so the caller stops what started even if a later one fails.
 */
export async function startRlfContenders(
  redisNodes: { host: string; port: number }[],
  environments: number,
  servers: Stoppable[],
): Promise<RlfContenders> {
  const urls: Record<RlfClient, string> = { plain: "", pipelined: "" };
  const limiters = new Map<RlfClient, RateLimiterRedis>();
  for (const kind of ["plain", "pipelined"] as const) {
    const rlfClient = new Cluster(redisNodes, { enableAutoPipelining: kind === "pipelined" });
    const limiter = new RateLimiterRedis({
      storeClient: rlfClient,
      keyPrefix: `bench-http-${Date.now()}`,
      points: 1_000_000_000,
      duration: 60,
    });
    limiters.set(kind, limiter);
    const { url, stop } = await rlfServer(limiter);
    urls[kind] = url;
    servers.push({
      stop: async () => {
        await stop();
        rlfClient.disconnect();
      },
    });
  }
  // rate-limiter-flexible in the same emulation as the check API: each execution environment with its own
  // plain client (one command at a time: nothing to pipeline), one invocation each at a time, behind the
  // same local Function URL server. Against this row the ratio is the code's alone; against the servers
  // above it is the code's and the Lambda model's together.
  const rlfEnvironments = await Promise.all(
    Array.from({ length: environments }, async () => {
      const client = new Cluster(redisNodes, { enableAutoPipelining: false });
      await warmUp(client, { timeoutMs: 4_000 });
      const limiter = new RateLimiterRedis({
        storeClient: client,
        keyPrefix: `bench-http-lambda-${Date.now()}`,
        points: 1_000_000_000,
        duration: 60,
      });
      return { client, limiter };
    }),
  );
  const rlfLambda = await startFunctionUrlServer(
    rlfEnvironments.map(({ limiter }) => async (event: ReturnType<typeof functionUrlEvent>) => {
      const { key } = JSON.parse(event.body ?? "{}") as { key: string };
      try {
        const res = await limiter.consume(key);
        return {
          statusCode: 200,
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ allowed: true, remaining: res.remainingPoints }),
        };
      } catch {
        return { statusCode: 429 };
      }
    }),
  );
  servers.push({
    stop: async () => {
      await rlfLambda.stop();
      for (const { client } of rlfEnvironments) client.disconnect();
    },
  });
  return { urls, limiters, lambdaUrl: rlfLambda.url, environments: rlfEnvironments.map(({ limiter }) => limiter) };
}

/** rate-limiter-flexible behind the smallest Node HTTP server: the body's key, consumed, as JSON. */
async function rlfServer(rlf: RateLimiterRedis): Promise<{ url: string; stop(): Promise<void> }> {
  const server = createServer((request, response) => {
    let text = "";
    request.on("data", (chunk: Buffer) => {
      text += chunk;
    });
    request.on("end", () => {
      const { key } = JSON.parse(text) as { key: string };
      rlf.consume(key).then(
        (res) => {
          // with its length, as the local Function URL server answers (not in chunked transfer coding)
          const reply = JSON.stringify({ allowed: true, remaining: res.remainingPoints });
          response
            .writeHead(200, { "content-type": "application/json", "content-length": String(Buffer.byteLength(reply)) })
            .end(reply);
        },
        () => response.writeHead(429).end(),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}/`,
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
