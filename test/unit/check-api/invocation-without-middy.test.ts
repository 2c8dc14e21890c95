// The check API's invocation without middy (commit 2ca2f70): it must do what middy with
// injectLambdaContext (or lambdaContextOf) and logMetrics did, on success and on error. middy awaits the
// handler inside its own try, so a handler that throws synchronously still has its stored metrics published
// (logMetrics' onError) and the invocation still ends as a rejected promise.
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import type { APIGatewayProxyEventV2, Context } from "aws-lambda";
import { afterEach, describe, expect, it, vi } from "vitest";
import { Limiter } from "../../../functions/core/limits/limiter.ts";
import { NegativeCache } from "../../../functions/core/limits/negative-cache.ts";
import { makeCheckApiHandler } from "../../../functions/handlers/check-api-handler.ts";
import { checkApiContext as context, emfDocuments } from "../../support/check-api-invocation.ts";
import { localIam, localTenancy } from "../../support/tenants.ts";

const event = (path: string, body: string) =>
  ({
    rawPath: path,
    body,
    isBase64Encoded: false,
    headers: {},
    requestContext: { http: { method: "POST" }, authorizer: { iam: localIam } },
  }) as unknown as APIGatewayProxyEventV2;

const limitBody = JSON.stringify({ key: "k", algorithm: "fixed-window", max: 1, windowMs: 1000 });

/**
 * A check API whose limiter's `decide` fails as `fail` says and whose logger cannot write its error line
 * (a log sink that throws, as a console write can); `sampleRateValue` picks the path (0: without middy).
 */
function handlerWith(options: { sampleRateValue: number; fail: "throw" | "reject" }) {
  vi.stubEnv("POWERTOOLS_METRICS_DISABLED", "false");
  const metrics = new Metrics({ namespace: "Test", serviceName: "check-api" });
  const logger = new Logger({ serviceName: "check-api", logLevel: "ERROR", sampleRateValue: options.sampleRateValue });
  // only the fault's own line fails (the sampling draw's debug line, on middy's path, still prints)
  type Item = { getAttributes(): Record<string, unknown> };
  type Printer = { printLog(level: number, item: Item): void };
  vi.spyOn(logger as unknown as Printer, "printLog").mockImplementation((_level, item) => {
    if (item.getAttributes().message === "check failed") throw new Error("log sink failed");
  });
  const limiter = new Limiter({
    store: {
      runLimit: () => Promise.reject(new Error("unused")),
      runLimits: () => Promise.reject(new Error("unused")),
    },
  });
  vi.spyOn(limiter, "decide").mockImplementation(() => {
    const bug = new TypeError("a defect");
    if (options.fail === "throw") throw bug;
    return Promise.reject(bug);
  });
  const handler = makeCheckApiHandler({
    tenancy: async () => localTenancy(),
    limiter,
    frequency: () => Promise.reject(new Error("not used")),
    health: () => Promise.reject(new Error("not used")),
    logger,
    metrics,
  }) as (event: APIGatewayProxyEventV2, context: Context) => Promise<unknown>;
  return { handler, metrics };
}

/** How an invocation ended: a sync throw (never a promise), a rejection, or a reply. */
async function outcome(invoke: () => Promise<unknown>): Promise<"threw" | "rejected" | "answered"> {
  let promise: Promise<unknown>;
  try {
    promise = invoke();
  } catch {
    return "threw";
  }
  return promise.then(
    () => "answered",
    () => "rejected",
  );
}

afterEach(() => {
  vi.unstubAllEnvs();
  vi.restoreAllMocks();
});

describe("check API invocation without middy, against middy's", () => {
  it("middy's path (a sample rate): a synchronous fault still publishes one document and rejects", async () => {
    const { handler } = handlerWith({ sampleRateValue: 0.5, fail: "throw" });
    const printed = emfDocuments();
    for (const id of ["r1", "r2"]) {
      expect(await outcome(() => handler(event("/v1/limit", limitBody), context(id)))).toBe("rejected");
    }
    expect(printed().map((d) => d.requests)).toEqual([1, 1]);
  });

  it("without middy: a rejected fault publishes one document per invocation (held)", async () => {
    const { handler } = handlerWith({ sampleRateValue: 0, fail: "reject" });
    const printed = emfDocuments();
    for (const id of ["r1", "r2"]) {
      expect(await outcome(() => handler(event("/v1/limit", limitBody), context(id)))).toBe("rejected");
    }
    expect(printed().map((d) => d.requests)).toEqual([1, 1]);
  });

  // Guards a fixed defect (below). Contract (2ca2f70, "the same calls, in the same order, on success and on error"): one EMF
  // document per invocation, published after the handler whether it answered or failed, as logMetrics'
  // onError did. A fault thrown before the route's promise (decide throwing synchronously) whose answer
  // itself throws (the error line cannot be written) escaped `handler` synchronously: the wrapper's
  // `reply.finally(publishStoredMetrics)` was never reached, the invocation threw instead of rejecting, and
  // its `requests` stayed in the store, published with the next invocation that completes.
  it("without middy: a synchronous fault still publishes one document per invocation and rejects", async () => {
    const { handler } = handlerWith({ sampleRateValue: 0, fail: "throw" });
    const printed = emfDocuments();
    const ends: string[] = [];
    for (const id of ["r1", "r2"]) ends.push(await outcome(() => handler(event("/v1/limit", limitBody), context(id))));
    expect(ends).toEqual(["rejected", "rejected"]);
    expect(printed().map((d) => d.requests)).toEqual([1, 1]);
  });

  // The same contract, reached without any logging fault: a Lambda context missing (a local runner that
  // passes none). middy runs injectLambdaContext's before inside its try: the invocation rejects. The plain
  // function called addContext outside any promise: it threw synchronously.
  it("without middy: a failure before the handler (no context) rejects, as under middy", async () => {
    vi.stubEnv("POWERTOOLS_METRICS_DISABLED", "true");
    const handler = makeCheckApiHandler({
      tenancy: async () => localTenancy(),
      limiter: new Limiter({
        store: {
          runLimit: () => Promise.reject(new Error("unused")),
          runLimits: () => Promise.reject(new Error("unused")),
        },
      }),
      frequency: () => Promise.reject(new Error("not used")),
      health: () => Promise.reject(new Error("not used")),
      logger: new Logger({ serviceName: "check-api" }),
      metrics: new Metrics({ namespace: "Test", serviceName: "check-api" }),
    }) as (event: APIGatewayProxyEventV2, context: Context) => Promise<unknown>;
    expect(await outcome(() => handler(event("/v1/limit", limitBody), undefined as unknown as Context))).toBe(
      "rejected",
    );
  });

  it("held: dimensions do not leak between invocations, and a cached denial is counted like a fresh one", async () => {
    vi.stubEnv("POWERTOOLS_METRICS_DISABLED", "false");
    const metrics = new Metrics({ namespace: "Test", serviceName: "check-api" });
    let now = 1_000_000;
    const cache = new NegativeCache({ now: () => now });
    const limiter = new Limiter({
      store: {
        runLimit: () => Promise.reject(new Error("unused")),
        runLimits: () => Promise.reject(new Error("unused")),
      },
    });
    const decide = vi
      .spyOn(limiter, "decide")
      .mockImplementation(() =>
        Promise.resolve({ allowed: false, limit: 1, remaining: 0, resetAt: now + 500, retryAfterMs: 500 }),
      );
    const handler = makeCheckApiHandler({
      tenancy: async () => localTenancy(),
      limiter,
      frequency: () => Promise.reject(new Error("not used")),
      health: () => Promise.resolve({ ok: true, redis: "ok" }),
      logger: new Logger({ serviceName: "check-api" }),
      metrics,
      negativeCache: cache,
    }) as (event: APIGatewayProxyEventV2, context: Context) => Promise<{ statusCode: number; body: string }>;
    const printed = emfDocuments();
    const fresh = await handler(event("/v1/limit", limitBody), context("r1"));
    now += 100;
    const cached = await handler(event("/v1/limit", limitBody), context("r2"));
    // expired: the store is asked again (size still counts the expired entry until the lookup drops it)
    now += 400;
    expect(cache.size).toBe(1);
    await handler(event("/v1/limit", limitBody), context("r3"));
    expect(decide).toHaveBeenCalledTimes(2);
    // a GET of health between: no algorithm dimension carried over from the denial before
    await handler(
      { ...event("/v1/health", ""), requestContext: { http: { method: "GET" } } } as unknown as APIGatewayProxyEventV2,
      context("r4"),
    );
    expect(Object.keys(JSON.parse(fresh.body))).toEqual(Object.keys(JSON.parse(cached.body)));
    expect(JSON.parse(cached.body)).toMatchObject({ allowed: false, retryAfterMs: 400 });
    const documents = printed();
    expect(documents.map((d) => [d.requests, d.denied, d.algorithm])).toEqual([
      [1, 1, "fixed-window"],
      [1, 1, "fixed-window"],
      [1, 1, "fixed-window"],
      [1, undefined, undefined],
    ]);
  });

  it("held: while the cache holds a denial, requests it never answers (at, cost 0) and /v1/limits go to the store", async () => {
    const now = 1_000_000;
    const cache = new NegativeCache({ now: () => now });
    const limiter = new Limiter({
      store: {
        runLimit: () => Promise.reject(new Error("unused")),
        runLimits: () => Promise.reject(new Error("unused")),
      },
    });
    const denial = { allowed: false, limit: 1, remaining: 0, resetAt: now + 500, retryAfterMs: 500 };
    const decide = vi.spyOn(limiter, "decide").mockImplementation(() => Promise.resolve(denial));
    const checkAll = vi
      .spyOn(limiter, "checkAll")
      .mockImplementation(() => Promise.resolve({ allowed: false, results: [denial] } as never));
    const handler = makeCheckApiHandler({
      tenancy: async () => localTenancy(),
      limiter,
      frequency: () => Promise.reject(new Error("not used")),
      health: () => Promise.resolve({ ok: true, redis: "ok" }),
      logger: new Logger({ serviceName: "check-api" }),
      metrics: new Metrics({ namespace: "Test", serviceName: "check-api" }),
      negativeCache: cache,
    }) as (event: APIGatewayProxyEventV2, context: Context) => Promise<{ statusCode: number }>;
    await handler(event("/v1/limit", limitBody), context("r1"));
    expect(cache.size).toBe(1);
    const spec = { key: "k", algorithm: "fixed-window", max: 1, windowMs: 1000 };
    for (const body of [
      { ...spec, at: now },
      { ...spec, cost: 0 },
    ]) {
      await handler(event("/v1/limit", JSON.stringify(body)), context("r2"));
    }
    // a denial of a request the cache never answers is not remembered either
    expect(cache.size).toBe(1);
    await handler(event("/v1/limits", JSON.stringify({ limits: [spec] })), context("r3"));
    expect([decide.mock.calls.length, checkAll.mock.calls.length]).toEqual([3, 1]);
  });
});
