// The check API's Function URL adapter: its routes, its metrics, and what a counter-store outage answers.
// The decisions come from the core (Limiter, Capper); the HTTP mechanics from http.ts.
import type { Logger } from "@aws-lambda-powertools/logger";
import { injectLambdaContext } from "@aws-lambda-powertools/logger/middleware";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import { logMetrics } from "@aws-lambda-powertools/metrics/middleware";
import middy from "@middy/core";
import type { APIGatewayProxyEventV2, Context } from "aws-lambda";
import type { SyncReply } from "../../sdk/src/wire.ts";
import type { FrequencyResult } from "../core/capping/frequency.ts";
import type { LimitSpec } from "../core/limits/limit-specs.ts";
import type { Limiter } from "../core/limits/limiter.ts";
import { cacheIdentity, type NegativeCache } from "../core/limits/negative-cache.ts";
import {
  type RulesRefusal,
  RulesUnavailableError,
  StoreReplyError,
  StoreUnavailableError,
} from "../core/shared/errors.ts";
import { actionFor, HttpError, type HttpResponse, json, parseJsonObject, type Routes, refusal } from "./http.ts";
import { rateLimitHeaders } from "./rate-limit-headers.ts";

export interface HealthReport {
  ok: boolean;
  redis: "ok" | "unavailable";
  policyVersion?: string;
  segments?: Record<string, number>;
  /** The policy or bitmap objects the last refresh refused, and why (the last good rules stay in service). */
  refused?: readonly RulesRefusal[];
}

export interface CheckApiDeps {
  limiter: Limiter;
  /** POST /v1/frequency: one user, one channel, the campaign caps. */
  frequency: (body: unknown) => Promise<FrequencyResult>;
  health: () => Promise<HealthReport>;
  /** POST /v1/quotas/sync: one Quotas sync call for clients outside the VPC (sdk/src/wire.ts). */
  quotaSync?: (body: unknown) => Promise<SyncReply>;
  negativeCache?: NegativeCache;
  logger: Logger;
  metrics: Metrics;
}

/** The time a validated request was decided at: its `at` (a replay or backfill), or now. */
const decidedAt = (body: Record<string, unknown>) => (typeof body.at === "number" ? body.at : Date.now());

/** The check API's own body field: what to answer when the counter store does not. */
function checkOnStoreError(body: Record<string, unknown>): void {
  const { onStoreError } = body;
  if (onStoreError !== undefined && onStoreError !== "allow" && onStoreError !== "deny") {
    throw new HttpError(400, "invalid_request", 'expected "allow" or "deny"', "onStoreError");
  }
}

export function makeCheckApiHandler(deps: CheckApiDeps) {
  const { limiter, negativeCache, logger, metrics } = deps;

  // one EMF document per request (flushed by logMetrics), with the algorithm as a dimension
  const count = (algorithm: string, result: { allowed: boolean; limit?: number; remaining?: number }) => {
    metrics.addDimension("algorithm", algorithm);
    metrics.addMetric(result.allowed ? "allowed" : "denied", MetricUnit.Count, 1);
    const { limit = 0, remaining = 0 } = result;
    if (result.allowed && limit > 0 && remaining <= limit * 0.2) metrics.addMetric("nearLimit", MetricUnit.Count, 1);
  };

  const routes: Routes = {
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
        // onStoreError is this layer's (checked with the body), not the frequency check's
        const { onStoreError: _, ...request } = body;
        const result = await deps.frequency(request);
        count("frequency", result);
        return json(200, result);
      },
    },
    ...(deps.quotaSync
      ? {
          "/v1/quotas/sync": {
            POST: async (body: Record<string, unknown>) => {
              const reply = await deps.quotaSync!(body);
              metrics.addMetric("quotaSyncs", MetricUnit.Count, 1);
              metrics.addMetric("quotaSyncKeys", MetricUnit.Count, reply.entries.length);
              return json(200, reply);
            },
          },
        }
      : {}),
    "/v1/health": {
      GET: async () => {
        const report = await deps.health();
        return json(report.ok ? 200 : 503, report);
      },
    },
  };

  const handler = async (event: APIGatewayProxyEventV2, _context: Context): Promise<HttpResponse> => {
    metrics.addMetric("requests", MetricUnit.Count, 1);
    let body: Record<string, unknown> = {};
    try {
      const action = actionFor(routes, event);
      if (event.requestContext.http.method.toUpperCase() === "POST") {
        body = parseJsonObject(event);
        checkOnStoreError(body);
      }
      return await action(body);
    } catch (error) {
      const refused = refusal(error);
      if (refused) return refused;
      if (error instanceof StoreUnavailableError) {
        metrics.addMetric("storeErrors", MetricUnit.Count, 1);
        logger.warn("store unavailable", { path: event.rawPath, error: error.message });
        // `maybeCounted`: the command reached Redis before the answer was given up, so it may have run
        const maybeCounted = error.mayHaveRun;
        if (body.onStoreError === "allow") {
          metrics.addMetric("allowedOnStoreError", MetricUnit.Count, 1);
          return json(200, { allowed: true, reason: "store_unavailable", maybeCounted });
        }
        return json(
          503,
          {
            error: {
              code: "store_unavailable",
              message: `the counter store did not answer in time; ${maybeCounted ? "the request may have been counted" : "nothing was counted"}`,
              maybeCounted,
            },
          },
          { "retry-after": "1" },
        );
      }
      if (error instanceof RulesUnavailableError) {
        metrics.addMetric("rulesUnavailable", MetricUnit.Count, 1);
        logger.error("no valid rules loaded", { path: event.rawPath, error: error.message });
        return json(
          503,
          { error: { code: "rules_unavailable", message: "no valid capping policy is loaded" } },
          { "retry-after": "5" },
        );
      }
      // Redis answered with an error (StoreReplyError) or a bug: never fail-open, whatever onStoreError says
      if (error instanceof StoreReplyError) metrics.addMetric("storeReplyErrors", MetricUnit.Count, 1);
      logger.error("check failed", {
        path: event.rawPath,
        error: error as Error,
        ...(error instanceof StoreReplyError ? { reply: error.reply } : {}),
      });
      return json(500, { error: { code: "internal_error", message: "internal error" } });
    }
  };

  // No early-timeout timer per invocation: every Redis call has its own deadline (CHECK_TIMEOUT_MS),
  // far inside the function's timeout.
  return middy(handler, { timeoutEarlyInMillis: 0 }).use(injectLambdaContext(logger)).use(logMetrics(metrics));
}
