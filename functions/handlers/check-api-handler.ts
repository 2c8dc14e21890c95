// The check API's Function URL adapter: its routes, its metrics, and what a counter-store outage answers.
// The decisions come from the core (Limiter, Capper); the HTTP mechanics from http.ts.
import type { Logger } from "@aws-lambda-powertools/logger";
import { injectLambdaContext } from "@aws-lambda-powertools/logger/middleware";
import { Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import { logMetrics } from "@aws-lambda-powertools/metrics/middleware";
import middy from "@middy/core";
import type { APIGatewayProxyEventV2, Context } from "aws-lambda";
import type { SyncReply } from "../../sdk/src/protocol/index.ts";
import { frequencyLine } from "../core/capping/archive-lines.ts";
import type { FrequencyResult } from "../core/capping/frequency.ts";
import { limitLine } from "../core/limits/archive-lines.ts";
import type { LimitResult, LimitSpec } from "../core/limits/limit-specs.ts";
import type { Limiter, ValidLimitRequest } from "../core/limits/limiter.ts";
import { cacheIdentity, type NegativeCache } from "../core/limits/negative-cache.ts";
import { type Clock, systemClock } from "../core/shared/clock.ts";
import type { DecisionLog } from "../core/shared/decision-archive.ts";
import {
  type RulesRefusal,
  RulesUnavailableError,
  StoreLostError,
  StoreReplyError,
  StoreUnavailableError,
} from "../core/shared/errors.ts";
import type { StoreEpochStatus } from "../core/shared/store-epoch.ts";
import type { Tenancy, Tenant } from "../core/shared/tenants.ts";
import type { CheckApiRoutes } from "./function-urls.ts";
import { actionFor, HttpError, type HttpResponse, json, parseJsonObject, type Routes, refusal } from "./http.ts";
import { rateLimitHeaders } from "./rate-limit-headers.ts";
import { authorizeRequest, intentOf, principalOf } from "./tenant-authorization.ts";

export interface HealthReport {
  ok: boolean;
  redis: "ok" | "unavailable";
  policyVersion?: string;
  segments?: Record<string, number>;
  /** The policy or bitmap objects the last refresh refused, and why (the last good rules stay in service). */
  refused?: readonly RulesRefusal[];
  /** The store epoch: when the store was initialised, and the hash slots this function found lost. */
  store?: StoreEpochStatus;
}

export interface CheckApiDeps {
  limiter: Limiter;
  /** POST /v1/frequency: one user, one channel, the campaign caps. */
  frequency: (body: unknown) => Promise<FrequencyResult>;
  health: () => Promise<HealthReport>;
  /**
   * POST /v1/quotas/sync: one Quotas sync call for clients outside the VPC (sdk/src/protocol/wire.ts), in
   * the tenant's namespace.
   */
  quotaSync?: (body: unknown, tenant: Tenant) => Promise<SyncReply>;
  /**
   * The tenants of the policy in service: who may call which route (docs/tenants.md). `quotaRule`, the rule
   * a sync names: a source still on the previous policy looks again first (the rule may be new). The
   * tenancy itself when the rules in service answer without a refresh (no promise to wait on per request).
   */
  tenancy: (request: { quotaRule?: string }) => Tenancy | Promise<Tenancy>;
  /**
   * What this function serves: every route, or `quota-sync`, `POST /v1/quotas/sync` alone (every other route
   * 404), the stack's QuotaSync function, whose URL Quotas clients are granted (IAM cannot narrow a Function
   * URL grant to a path) and whose concurrency is its own, not the check API's.
   */
  routes?: CheckApiRoutes;
  negativeCache?: NegativeCache;
  /** The decision archive: a line per decision; what is due is written after the reply is made. */
  archive?: DecisionLog & { flushDue(): Promise<void>; isFlushDue(): boolean };
  /** The clock a request without `at` is decided by (default: the system clock). */
  clock?: Clock;
  logger: Logger;
  metrics: Metrics;
}

/** The time a validated request was decided at: its `at` (a replay or backfill), or now. */
const decidedAt = (body: Record<string, unknown>, clock: Clock) =>
  typeof body.at === "number" ? body.at : clock.now();

/** A request's identity in the negative cache: its tenant's namespace first, so tenants never share a denial. */
function tenantCacheIdentity(tenant: Tenant, request: ValidLimitRequest): string | undefined {
  const identity = cacheIdentity(request);
  return identity === undefined ? undefined : `${tenant.namespace} ${identity}`;
}

/** The cached denial of `request`, if it has one (undefined for a request the cache never answers). */
function cachedDenial(cache: NegativeCache, tenant: Tenant, request: ValidLimitRequest): LimitResult | undefined {
  const identity = tenantCacheIdentity(tenant, request);
  return identity === undefined ? undefined : cache.get(identity);
}

/** The tenant of a route that has one: the handler authorized the request before its action ran. */
function tenantOf(tenant: Tenant | undefined): Tenant {
  if (tenant === undefined) throw new Error("unreachable: a tenant route ran without its tenant");
  return tenant;
}

/** The check API's own body field: what to answer when the counter store does not. */
function checkOnStoreError(body: Record<string, unknown>): void {
  const { onStoreError } = body;
  if (onStoreError !== undefined && onStoreError !== "allow" && onStoreError !== "deny") {
    throw new HttpError(400, "invalid_request", 'expected "allow" or "deny"', "onStoreError");
  }
}

/** The metric each authorization refusal is counted in (docs/tenants.md). */
const FORBIDDEN_METRICS: Record<string, string> = {
  unknown_principal: "unknownPrincipal",
  ambiguous_principal: "ambiguousPrincipal",
  operation_not_allowed: "operationNotAllowed",
};

export function makeCheckApiHandler(deps: CheckApiDeps) {
  const { limiter, negativeCache, logger, metrics, archive } = deps;
  const clock = deps.clock ?? systemClock;

  // One EMF document per request (flushed by logMetrics), with the algorithm as a dimension. With
  // POWERTOOLS_METRICS_DISABLED (read once, at cold start, as Powertools does) nothing is counted and
  // logMetrics is left out: metrics added without it to publish them would pile up in the store.
  const metricsOn = !metricsDisabled(metrics);
  const add = (name: string, value = 1) => {
    if (metricsOn) metrics.addMetric(name, MetricUnit.Count, value);
  };
  const count = (algorithm: string, result: { allowed: boolean; limit?: number; remaining?: number }) => {
    if (!metricsOn) return;
    metrics.addDimension("algorithm", algorithm);
    add(result.allowed ? "allowed" : "denied");
    const { limit = 0, remaining = 0 } = result;
    if (result.allowed && limit > 0 && remaining <= limit * 0.2) add("nearLimit");
  };

  /** The reply to a /v1/limit request; a fresh denial is remembered (by the cache, which keeps denials only). */
  const limitReply = (
    tenant: Tenant,
    request: ValidLimitRequest,
    body: Record<string, unknown>,
    reply: LimitResult,
    fresh: boolean,
  ) => {
    if (fresh && !reply.allowed && negativeCache) {
      const identity = tenantCacheIdentity(tenant, request);
      if (identity) negativeCache.remember(identity, reply);
    }
    count(request.algorithm, reply);
    archive?.add(limitLine(request, reply, clock.now(), decidedAt(body, clock)));
    return json(200, reply, rateLimitHeaders(reply, decidedAt(body, clock), [request]));
  };

  const quotaSync = deps.quotaSync;
  const quotaRoutes: Routes = quotaSync
    ? {
        "/v1/quotas/sync": {
          POST: async (body, tenant) => {
            const reply = await quotaSync(body, tenantOf(tenant));
            add("quotaSyncs");
            add("quotaSyncKeys", reply.entries.length);
            return json(200, reply);
          },
        },
      }
    : {};
  const healthRoute: Routes = {
    "/v1/health": {
      GET: async () => {
        const report = await deps.health();
        return json(report.ok ? 200 : 503, report);
      },
    },
  };
  const routes: Routes = {
    "/v1/limit": {
      // not async: a then on the decision, not an await in an async function (the promises and ticks of
      // one more async layer on every check)
      POST: (body, caller) => {
        const tenant = tenantOf(caller);
        const request = limiter.validate(body);
        // the cache is looked in only while it holds a denial: an environment that denied nothing lately
        // builds no identity for a request (only a fresh denial is remembered: see limitReply)
        const cached = negativeCache?.size ? cachedDenial(negativeCache, tenant, request) : undefined;
        // a cached denial is the same reply as the fresh denial it repeats
        if (cached) return Promise.resolve(limitReply(tenant, request, body, cached, false));
        return limiter
          .decide(request, tenant.namespace)
          .then((reply) => limitReply(tenant, request, body, reply, true));
      },
    },
    "/v1/limits": {
      POST: async (body, tenant) => {
        const reply = await limiter.checkAll(body, tenantOf(tenant).namespace);
        count("limits", { allowed: reply.allowed });
        if (archive) {
          const [now, at, scope] = [clock.now(), decidedAt(body, clock), String(body.scope)];
          for (const result of reply.results) archive.add(limitLine({ ...result, scope }, result, now, at));
        }
        const denied = reply.results.find((r) => !r.allowed);
        const headline = denied ?? reply.results.reduce((a, b) => (b.remaining < a.remaining ? b : a));
        const specs = body.limits as LimitSpec[];
        return json(
          200,
          reply,
          rateLimitHeaders({ ...headline, allowed: reply.allowed }, decidedAt(body, clock), specs),
        );
      },
    },
    "/v1/frequency": {
      POST: async (body) => {
        // onStoreError is this layer's (checked with the body), not the frequency check's; the body is
        // copied only when it has one (an object rest on every request costs more than the check's validation)
        const result = await deps.frequency("onStoreError" in body ? withoutStoreError(body) : body);
        count("frequency", result);
        archive?.add(frequencyLine(body as never, result, clock.now(), decidedAt(body, clock)));
        return json(200, result);
      },
    },
    ...quotaRoutes,
    ...healthRoute,
  };

  // the quota-sync function answers its health too: a load balancer or an operator probes its URL alone
  const served = deps.routes === "quota-sync" ? { ...quotaRoutes, ...healthRoute } : routes;

  /** A made reply, once the archive's due writes are done (none due: at once): the decision never waits on them. */
  const answered = (made: HttpResponse) => (archive?.isFlushDue() ? archive.flushDue().then(() => made) : made);

  // Not async: a request's refusals and faults, thrown before its action's promise or rejecting it, are
  // answered by `failed`; an async handler awaiting the action cost one more promise layer per request.
  const handler = (event: APIGatewayProxyEventV2): Promise<HttpResponse> => {
    add("requests");
    let body: Record<string, unknown> = {};
    try {
      // the quota-sync function (a grant for Quotas clients) reaches quota sync only, never a limit or a cap
      const action = actionFor(served, event);
      if (event.requestContext.http.method.toUpperCase() === "POST") {
        body = parseJsonObject(event);
        checkOnStoreError(body);
      }
      const intent = intentOf(event.rawPath, body);
      let reply: Promise<HttpResponse>;
      if (intent === undefined) {
        // health is no tenant's
        reply = action(body, undefined);
      } else {
        // every other route runs as the caller's tenant, refused (403) before it reads or writes anything
        // when the caller has none or its tenant may not do what the request asks
        const principal = principalOf(event);
        const tenancy = deps.tenancy(intent.rule === undefined ? {} : { quotaRule: intent.rule });
        if (tenancy instanceof Promise) {
          reply = tenancy.then((loaded) => action(body, authorizeRequest(loaded, principal, intent)));
        } else {
          // the rules in service at hand: no promise to wait on before the action (a refusal thrown is answered below)
          try {
            reply = action(body, authorizeRequest(tenancy, principal, intent));
          } catch (error) {
            reply = Promise.reject(error);
          }
        }
      }
      // one then for the answer, a refusal or fault included, and the archive's writes due after it
      return reply.then(answered, (error: unknown) => answered(failed(error, event, body)));
    } catch (error) {
      return Promise.resolve(failed(error, event, body));
    }
  };

  /** The answer to a request that threw or rejected with `error`: a refusal (4xx), or a fault (503, 500). */
  const failed = (error: unknown, event: APIGatewayProxyEventV2, body: Record<string, unknown>): HttpResponse => {
    const refused = refusal(error);
    if (refused) {
      if (error instanceof HttpError && error.status === 403) {
        add(FORBIDDEN_METRICS[error.code] ?? "forbidden");
        logger.warn("request refused", { path: event.rawPath, code: error.code, reason: error.message });
      }
      return refused;
    }
    if (error instanceof StoreUnavailableError) {
      add("storeErrors");
      logger.warn("store unavailable", { path: event.rawPath, error: error.message });
      // `maybeCounted`: the command reached Redis before the answer was given up, so it may have run
      const maybeCounted = error.mayHaveRun;
      if (body.onStoreError === "allow") {
        add("allowedOnStoreError");
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
    if (error instanceof StoreLostError) {
      // onStoreLoss pause: nothing counted, whatever onStoreError says (Redis answered), until acknowledged
      add("storeLost");
      return json(
        503,
        {
          error: {
            code: "store_lost",
            message: `the counter store lost this key's state (hash slot ${error.slot}); nothing was counted until an operator acknowledges the loss`,
            slot: error.slot,
          },
        },
        { "retry-after": "60" },
      );
    }
    if (error instanceof RulesUnavailableError) {
      add("rulesUnavailable");
      logger.error("no valid rules loaded", { path: event.rawPath, error: error.message });
      return json(
        503,
        { error: { code: "rules_unavailable", message: "no valid capping policy is loaded" } },
        { "retry-after": "5" },
      );
    }
    // Redis answered with an error (StoreReplyError) or a bug: never fail-open, whatever onStoreError says
    if (error instanceof StoreReplyError) add("storeReplyErrors");
    logger.error("check failed", {
      path: event.rawPath,
      error: error as Error,
      ...(error instanceof StoreReplyError ? { reply: error.reply } : {}),
    });
    return json(500, { error: { code: "internal_error", message: "internal error" } });
  };

  // No early-timeout timer per invocation: every Redis call has its own deadline (CHECK_TIMEOUT_MS),
  // far inside the function's timeout.
  if (logSampleRate(logger) !== 0) {
    // Powertools' own middleware, which draws log sampling again per invocation (see lambdaContextOf)
    const middleware = middy(handler, { timeoutEarlyInMillis: 0 }).use(injectLambdaContext(logger));
    return metricsOn ? middleware.use(logMetrics(metrics)) : middleware;
  }
  // What middy ran around the handler with lambdaContextOf and logMetrics, without middy: its runRequest and
  // runMiddlewares are async functions awaiting each middleware, several promises and ticks per invocation,
  // for two calls before the handler and one after (in a profile of 32 environments, middy's own frames
  // were about as much as the route's). The same calls, in the same order, on success and on error.
  return (event: APIGatewayProxyEventV2, context: Context): Promise<HttpResponse> => {
    let reply: Promise<HttpResponse>;
    try {
      logger.addContext(context);
      logger.logEventIfEnabled(event);
      reply = handler(event);
    } catch (error) {
      // a fault thrown before a promise exists (no context, a failing log write) rejects, as under middy
      reply = Promise.reject(error);
    }
    // one EMF document per invocation, published whether the handler answered or (a bug) rejected
    return metricsOn ? reply.finally(() => metrics.publishStoredMetrics()) : reply;
  };
}

/**
 * The invocation's Lambda context in every log line. Powertools' injectLambdaContext also draws log
 * sampling again per invocation, and that reads the environment (the log level variables) each time: in
 * the profile, more than the rest of the logger's work per request. Without a sample rate (Powertools'
 * default, and the check API's) the draw only sets the level it already has, so the context is added
 * alone. With a sample rate, or a Powertools whose internals do not say, injectLambdaContext as it is.
 */
export function lambdaContextOf(logger: Logger): middy.MiddlewareObj<APIGatewayProxyEventV2, HttpResponse> {
  if (logSampleRate(logger) !== 0) return injectLambdaContext(logger);
  return {
    before: (request) => {
      logger.addContext(request.context);
      logger.logEventIfEnabled(request.event);
    },
  };
}

/** The sample rate the Logger settled on at construction (its option, else POWERTOOLS_LOGGER_SAMPLE_RATE). */
const logSampleRate = (logger: Logger): unknown =>
  (logger as unknown as { powertoolsLogData?: { sampleRateValue?: unknown } }).powertoolsLogData?.sampleRateValue;

function withoutStoreError(body: Record<string, unknown>): Record<string, unknown> {
  const { onStoreError: _, ...rest } = body;
  return rest;
}

/** Powertools decides at construction whether metrics are off; its `isDisabled()` is protected. */
class MetricsSwitch extends Metrics {
  static isOff(metrics: Metrics): boolean {
    return (metrics as MetricsSwitch).isDisabled();
  }
}
const metricsDisabled = (metrics: Metrics) => MetricsSwitch.isOff(metrics);
