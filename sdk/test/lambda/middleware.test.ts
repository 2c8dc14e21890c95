// The middleware in the real frameworks over real HTTP requests: Express and Fastify servers on loopback,
// and a middy handler behind the local Function URL server. The store is a fake: the subject is the
// middleware (decisions, headers, 429s), not the sync.
import type { AddressInfo } from "node:net";
import middy from "@middy/core";
import type { APIGatewayProxyEventV2, APIGatewayProxyResultV2 } from "aws-lambda";
import express from "express";
import Fastify from "fastify";
import { afterEach, describe, expect, it } from "vitest";
import { startFunctionUrlServer } from "../../../scripts/local/function-url-server.ts";
import { expressQuotas } from "../../src/middleware/express.ts";
import { fastifyQuotas } from "../../src/middleware/fastify.ts";
import { middyQuotas } from "../../src/middleware/middy.ts";
import type { QuotaRule } from "../../src/protocol/index.ts";
import { createQuotas } from "../../src/quotas.ts";
import { fakeStore } from "../support/fake-store.ts";

const rule: QuotaRule = {
  mode: "approximate",
  limits: [
    { windowMs: 1_000, max: 100 },
    { windowMs: 5_000, max: 400 },
  ],
  leaseMs: 60_000,
  fallback: "deny",
  slotGroups: 1,
};

const stops: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0)) await stop();
});

/** A Quotas whose keys get 2 requests from the fake store, then a full window; warmed for `keys`. */
async function warmQuotas(keys: string[]) {
  const store = fakeStore({ rule, amount: 2, once: true });
  const quotas = createQuotas({ transport: store.transport, rules: { api: rule } });
  for (const key of keys) quotas.resolve("api", key);
  await quotas.sync();
  return { quotas, store };
}

async function get(url: string, apiKey: string) {
  const response = await fetch(url, { headers: { "x-api-key": apiKey } });
  return { status: response.status, headers: Object.fromEntries(response.headers), body: await response.json() };
}

function expectDecisions(results: Awaited<ReturnType<typeof get>>[]) {
  expect(results.map((r) => r.status)).toEqual([200, 200, 429]);
  expect(results[0]!.headers).toMatchObject({
    "ratelimit-limit": "100",
    "ratelimit-remaining": "1",
    "ratelimit-policy": "100;w=1, 400;w=5",
  });
  expect(results[0]!.headers["retry-after"]).toBeUndefined();
  expect(results[2]!.headers).toMatchObject({ "ratelimit-remaining": "0", "retry-after": "1" });
  expect(results[2]!.body).toEqual({ error: { code: "rate_limited", message: "quota api exhausted" } });
}

describe("middleware over real HTTP", () => {
  it("Express: allowed requests reach the route with RateLimit headers; the third, past the store's limit, gets 429 and Retry-After", async () => {
    const { quotas } = await warmQuotas(["alice"]);
    const app = express();
    app.use(expressQuotas(quotas, { rule: "api", key: (req) => String(req.headers["x-api-key"]) }));
    app.get("/hello", (_req, res) => {
      res.json({ hello: "world" });
    });
    const server = app.listen(0, "127.0.0.1");
    await new Promise((resolve) => server.once("listening", resolve));
    stops.push(() => new Promise((resolve) => server.close(resolve)));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hello`;
    const results = [await get(url, "alice"), await get(url, "alice"), await get(url, "alice")];
    expectDecisions(results);
    expect(results[0]!.body).toEqual({ hello: "world" });
  });

  it("Fastify: the onRequest hook decides before the route; keys are independent", async () => {
    const { quotas } = await warmQuotas(["alice", "bob"]);
    const app = Fastify();
    app.addHook("onRequest", fastifyQuotas(quotas, { rule: "api", key: (req) => String(req.headers["x-api-key"]) }));
    app.get("/hello", async () => ({ hello: "world" }));
    const url = `${await app.listen({ port: 0, host: "127.0.0.1" })}/hello`;
    stops.push(() => app.close());
    const results = [await get(url, "alice"), await get(url, "alice"), await get(url, "alice")];
    expectDecisions(results);
    expect((await get(url, "bob")).status).toBe(200);
  });

  it("middy: a Lambda handler behind a Function URL; the sync happens at the invocation boundary", async () => {
    const store = fakeStore({ rule, amount: 2, once: true });
    const quotas = createQuotas({ transport: store.transport, rules: { api: rule }, syncIntervalMs: 60_000 });
    const handler = middy<APIGatewayProxyEventV2, APIGatewayProxyResultV2>()
      .use(
        middyQuotas<APIGatewayProxyEventV2>(quotas, {
          rule: "api",
          key: (event) => String(event.headers["x-api-key"]),
        }),
      )
      .handler(async () => ({
        statusCode: 200,
        headers: { "content-type": "application/json" },
        body: '{"hello":"world"}',
      }));
    const local = await startFunctionUrlServer(handler as never);
    stops.push(() => local.stop());
    const url = `${local.url}/hello`;
    // the first invocation syncs for its new key; the second is within the interval and its allowance:
    // no sync; the third, with none left, asks the store once more, which says the window is full
    const results = [await get(url, "alice"), await get(url, "alice"), await get(url, "alice")];
    expectDecisions(results);
    expect(store.calls).toHaveLength(2);
    expect(results[0]!.body).toEqual({ hello: "world" });
  });
});
