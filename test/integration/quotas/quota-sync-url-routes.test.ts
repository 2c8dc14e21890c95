// Hostile coverage (these held): the QuotaSync function (the check API's code deployed with
// CHECK_API_ROUTES=quota-sync) reaches quota sync alone, whatever the method, path spelling, encoding or body;
// and only that setting narrows the routes (the invoked ARN, whatever its qualifier, does not).
// Contract (docs/api.md, "Check API (Function URL)"): "A second URL, the QuotaSync function's (output
// QuotaSyncUrl), serves POST /v1/quotas/sync alone and answers every other route 404".
// No Redis: the handler's deps are stubs that record being called.
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import type { APIGatewayProxyEventV2, Context } from "aws-lambda";
import { describe, expect, it } from "vitest";
import { Limiter } from "../../../functions/core/limits/limiter.ts";
import { makeCheckApiHandler } from "../../../functions/handlers/check-api-handler.ts";
import type { CheckApiRoutes } from "../../../functions/handlers/function-urls.ts";
import { localIam, localTenancy } from "../../support/tenants.ts";

const ARN = "arn:aws:lambda:eu-west-1:123456789012:function:tollgate-check-api";
const context = (invokedFunctionArn: string) =>
  ({
    awsRequestId: "r",
    functionName: "tollgate-check-api",
    functionVersion: "7",
    invokedFunctionArn,
    memoryLimitInMB: "1024",
    getRemainingTimeInMillis: () => 30_000,
  }) as unknown as Context;

const event = (method: string, rawPath: string, body = "{}", isBase64Encoded = false) =>
  ({
    rawPath,
    rawQueryString: "",
    body,
    isBase64Encoded,
    headers: { "content-type": "application/json" },
    requestContext: { http: { method, path: rawPath }, authorizer: { iam: localIam } },
  }) as unknown as APIGatewayProxyEventV2;

function handlerWithSpies(routes?: CheckApiRoutes) {
  const called: string[] = [];
  const limiter = new Limiter({
    store: {
      runLimit: () => {
        called.push("limit");
        return Promise.reject(new Error("limit reached"));
      },
      runLimits: () => {
        called.push("limits");
        return Promise.reject(new Error("limits reached"));
      },
    },
  });
  const handler = makeCheckApiHandler({
    tenancy: async () => localTenancy(["api"]),
    limiter,
    frequency: () => {
      called.push("frequency");
      return Promise.reject(new Error("frequency reached"));
    },
    health: async () => {
      called.push("health");
      return { ok: true } as never;
    },
    quotaSync: async () => {
      called.push("quotaSync");
      return { status: "norule", serverTime: 0, configVersion: "", instances: 0, entries: [] };
    },
    logger: new Logger({ serviceName: "review8", logLevel: "SILENT" }),
    metrics: new Metrics({ namespace: "Tollgate", serviceName: "check-api" }),
    ...(routes ? { routes } : {}),
  });
  return { handler, called };
}

const limitBody = JSON.stringify({ key: "k", algorithm: "fixed-window", max: 1, windowMs: 1000 });

describe("review8: the QuotaSync function reaches quota sync alone", () => {
  const paths = [
    "/v1/limit",
    "/v1/limits",
    "/v1/frequency",
    "/v1/health",
    "/v1/limit/",
    "//v1/limit",
    "/V1/LIMIT",
    "/v1/quotas/sync/",
    "/v1/quotas/sync/../../limit",
    "/v1/quotas/../limit",
    "/v1/quotas%2Fsync",
    "/v1/quotas/sync%00",
    "/v1/quotas/sync?x=1",
    "/v1/quotas/Sync",
    "",
    "/",
    "/__proto__",
    "/constructor",
    "/toString",
  ];
  const methods = ["POST", "GET", "HEAD", "OPTIONS", "PUT", "DELETE", "post", "get", "head"];

  for (const arn of [ARN, `${ARN}:live`, `arn:aws-cn:lambda:cn-north-1:123456789012:function:tollgate-quota-sync`]) {
    it(`answers 404 (or 405 on the sync route) and calls nothing for every other route and method (${arn})`, async () => {
      const { handler, called } = handlerWithSpies("quota-sync");
      for (const path of paths) {
        for (const method of methods) {
          // GET (and HEAD, answered as GET) /v1/health is the one other route it answers (its own test below)
          if (path === "/v1/health" && ["GET", "HEAD"].includes(method.toUpperCase())) continue;
          for (const [body, base64] of [
            [limitBody, false],
            [Buffer.from(limitBody).toString("base64"), true],
          ] as const) {
            const response = await handler(event(method, path, body, base64), context(arn));
            expect([404, 405], `${method} ${path}`).toContain(response.statusCode);
          }
        }
      }
      for (const method of ["GET", "HEAD", "OPTIONS", "PUT", "get", "head"]) {
        const response = await handler(event(method, "/v1/quotas/sync", limitBody), context(arn));
        expect(response.statusCode, method).toBe(405);
        expect(response.headers?.allow).toBe("POST");
      }
      expect(called).toEqual([]);
      const synced = await handler(event("POST", "/v1/quotas/sync", JSON.stringify({ v: 1 })), context(arn));
      // reaches quota sync (its own validation answers here: the body is not a SyncRequest)
      expect(synced.statusCode).not.toBe(404);
    });
  }

  // Contract: docs/api.md: `GET /v1/health` is served on the QuotaSync URL too, so a probe of that URL alone
  // sees whether its Redis answers; it used to answer 404 there.
  it("answers GET /v1/health on the QuotaSync URL, calling the health check alone", async () => {
    for (const arn of [ARN, `${ARN}:live`]) {
      const { handler, called } = handlerWithSpies("quota-sync");
      const health = await handler(event("GET", "/v1/health"), context(arn));
      expect(health.statusCode, arn).toBe(200);
      expect(called, arn).toEqual(["health"]);
      const head = await handler(event("HEAD", "/v1/health"), context(arn));
      expect(head.statusCode, arn).toBe(200);
    }
  });

  it("the check API (routes `all`, the default) serves every route, whatever the invoked ARN's qualifier", async () => {
    for (const [routes, arn] of [
      [undefined, ARN],
      ["all", ARN],
      ["all", `${ARN}:quotas`],
      [undefined, `${ARN}:quotas`],
    ] as const) {
      const { handler, called } = handlerWithSpies(routes);
      const health = await handler(event("GET", "/v1/health"), context(arn));
      expect(health.statusCode, arn).toBe(200);
      expect(called, arn).toEqual(["health"]);
    }
    for (const arn of [
      ARN,
      `${ARN}:live`,
      `${ARN}:7`,
      `${ARN}:$LATEST`,
      `${ARN}:Quotas`,
      "arn:aws:lambda:eu-west-1:1:function:quotas",
    ]) {
      const { handler, called } = handlerWithSpies();
      const health = await handler(event("GET", "/v1/health"), context(arn));
      expect(health.statusCode, arn).toBe(200);
      expect(called, arn).toEqual(["health"]);
    }
  });
});
