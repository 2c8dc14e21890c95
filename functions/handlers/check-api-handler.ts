// The check API's Function URL adapter: routes, body limits and parsing, status codes and headers. The
// decisions come from the core (Limiter, FrequencyChecker); this file only shapes HTTP.
import type { Logger } from "@aws-lambda-powertools/logger";
import { injectLambdaContext } from "@aws-lambda-powertools/logger/middleware";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import { logMetrics } from "@aws-lambda-powertools/metrics/middleware";
import middy from "@middy/core";
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from "aws-lambda";
import type { FrequencyResult } from "../core/capping/frequency.ts";
import type { LimitSpec } from "../core/limits/limit-specs.ts";
import type { Limiter } from "../core/limits/limiter.ts";
import { cacheIdentity, type NegativeCache } from "../core/limits/negative-cache.ts";
import { StoreUnavailableError, ValidationError } from "../core/shared/errors.ts";
import { duplicateMember } from "./json-members.ts";
import { rateLimitHeaders } from "./rate-limit-headers.ts";

export const MAX_BODY_BYTES = 64 * 1024;

export interface HealthReport {
  ok: boolean;
  redis: "ok" | "unavailable";
  policyVersion?: string;
  segments?: Record<string, number>;
}

export interface CheckApiDeps {
  limiter: Limiter;
  /** POST /v1/frequency: one user, one channel, the campaign caps. */
  frequency: (body: unknown) => Promise<FrequencyResult>;
  health: () => Promise<HealthReport>;
  negativeCache?: NegativeCache;
  logger: Logger;
  metrics: Metrics;
}

type Response = APIGatewayProxyStructuredResultV2;

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly path?: string,
  ) {
    super(message);
  }
}

const json = (status: number, body: unknown, headers: Record<string, string> = {}): Response => ({
  statusCode: status,
  headers: { "content-type": "application/json", ...headers },
  body: JSON.stringify(body),
});

/** The time a validated request was decided at: its `at` (a replay or backfill), or now. */
const decidedAt = (body: Record<string, unknown>) => (typeof body.at === "number" ? body.at : Date.now());

function parseBody(event: APIGatewayProxyEventV2): Record<string, unknown> {
  const raw = event.body ?? "";
  const text = event.isBase64Encoded ? Buffer.from(raw, "base64").toString("utf8") : raw;
  if (Buffer.byteLength(text) > MAX_BODY_BYTES)
    throw new HttpError(413, "payload_too_large", `body over ${MAX_BODY_BYTES} bytes`);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw new HttpError(400, "invalid_request", `not valid JSON: ${(error as Error).message}`, "body");
  }
  if (typeof body !== "object" || body === null || Array.isArray(body))
    throw new HttpError(400, "invalid_request", "expected a JSON object", "body");
  const repeated = duplicateMember(text);
  if (repeated !== undefined) throw new HttpError(400, "invalid_request", `${repeated}: given twice`, repeated);
  const { onStoreError } = body as { onStoreError?: unknown };
  if (onStoreError !== undefined && onStoreError !== "allow" && onStoreError !== "deny") {
    throw new HttpError(400, "invalid_request", 'expected "allow" or "deny"', "onStoreError");
  }
  return body as Record<string, unknown>;
}

/** The Allow field of a route: its methods, and HEAD wherever GET is. */
const allowed = (route: Record<string, unknown>) =>
  [...Object.keys(route), ...("GET" in route ? ["HEAD"] : [])].join(", ");

export function makeCheckApiHandler(deps: CheckApiDeps) {
  const { limiter, negativeCache, logger, metrics } = deps;

  // one EMF document per request (flushed by logMetrics), with the algorithm as a dimension
  const count = (algorithm: string, result: { allowed: boolean; limit?: number; remaining?: number }) => {
    metrics.addDimension("algorithm", algorithm);
    metrics.addMetric(result.allowed ? "allowed" : "denied", MetricUnit.Count, 1);
    const { limit = 0, remaining = 0 } = result;
    if (result.allowed && limit > 0 && remaining <= limit * 0.2) metrics.addMetric("nearLimit", MetricUnit.Count, 1);
  };

  const routes: Record<string, Record<string, (body: Record<string, unknown>) => Promise<Response>>> = {
    "/v1/limit": {
      POST: async (body) => {
        const identity = negativeCache ? cacheIdentity(body) : undefined;
        const cached = identity ? negativeCache?.get(identity) : undefined;
        if (cached) {
          const { algorithm } = body as { algorithm: string };
          count(algorithm, cached);
          // the same reply as the fresh denial it repeats
          return json(200, cached, rateLimitHeaders(cached, decidedAt(body), [body as LimitSpec]));
        }
        const result = await limiter.check(body);
        const { algorithm, ...reply } = result;
        // the reply, not the result: a cached answer has the fresh one's fields, no more
        if (identity) negativeCache?.remember(identity, reply);
        count(algorithm, result);
        // the limiter validated the body: it is a LimitSpec
        return json(200, reply, rateLimitHeaders(result, decidedAt(body), [body as LimitSpec]));
      },
    },
    "/v1/limits": {
      POST: async (body) => {
        const reply = await limiter.checkAll(body);
        count("limits", { allowed: reply.allowed });
        const denied = reply.results.find((r) => !r.allowed);
        const headline = denied ?? reply.results.reduce((a, b) => (b.remaining < a.remaining ? b : a));
        const specs = body.limits as LimitSpec[];
        return json(200, reply, rateLimitHeaders({ ...headline, allowed: reply.allowed }, decidedAt(body), specs));
      },
    },
    "/v1/frequency": {
      POST: async (body) => {
        const result = await deps.frequency(body);
        count("frequency", result);
        return json(200, result);
      },
    },
    "/v1/health": {
      GET: async () => {
        const report = await deps.health();
        return json(report.ok ? 200 : 503, report);
      },
    },
  };

  const handler = async (event: APIGatewayProxyEventV2, _context: Context): Promise<Response> => {
    const method = event.requestContext.http.method.toUpperCase();
    metrics.addMetric("requests", MetricUnit.Count, 1);
    const route = routes[event.rawPath];
    let body: Record<string, unknown> = {};
    try {
      if (!route) throw new HttpError(404, "not_found", `no route ${event.rawPath}`);
      // RFC 9110: HEAD is GET without the content, with the same status and header fields
      const action = route[method] ?? (method === "HEAD" ? route.GET : undefined);
      if (!action)
        throw new HttpError(
          405,
          "method_not_allowed",
          `${method} not allowed on ${event.rawPath}; use ${allowed(route)}`,
        );
      if (method === "POST") body = parseBody(event);
      const response = await action(body);
      return method === "HEAD" ? { ...response, body: "" } : response;
    } catch (error) {
      if (error instanceof HttpError) {
        const headers: Record<string, string> = error.status === 405 && route ? { allow: allowed(route) } : {};
        return json(
          error.status,
          { error: { code: error.code, message: error.message, ...(error.path ? { path: error.path } : {}) } },
          headers,
        );
      }
      if (error instanceof ValidationError) {
        return json(400, { error: { code: "invalid_request", message: error.message, path: error.path } });
      }
      if (error instanceof StoreUnavailableError) {
        metrics.addMetric("storeErrors", MetricUnit.Count, 1);
        logger.warn("store unavailable", { path: event.rawPath, error: error.message });
        if (body.onStoreError === "allow") {
          metrics.addMetric("allowedOnStoreError", MetricUnit.Count, 1);
          return json(200, { allowed: true, reason: "store_unavailable" });
        }
        return json(
          503,
          { error: { code: "store_unavailable", message: "the counter store did not answer in time" } },
          { "retry-after": "1" },
        );
      }
      logger.error("check failed", { path: event.rawPath, error: error as Error });
      return json(500, { error: { code: "internal_error", message: "internal error" } });
    }
  };

  // No early-timeout timer per invocation: every Redis call has its own deadline (CHECK_TIMEOUT_MS),
  // far inside the function's timeout.
  return middy(handler, { timeoutEarlyInMillis: 0 }).use(injectLambdaContext(logger)).use(logMetrics(metrics));
}
