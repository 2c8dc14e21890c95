// middy middleware for Lambda handlers. Timers do not run while an execution environment is frozen, so
// the Quotas loop is not started on Lambda: before each invocation the middleware syncs (awaited) when the
// last sync is older than the interval (or the key is new to this environment), then decides locally. Nothing is left running when the handler
// returns: the invocation ends at once.
import type { MiddlewareObj, Request } from "@middy/core";
import type { Quotas } from "../quotas.ts";
import { type CheckOptions, decisionHeaders, deniedBody, ruleOf } from "./options.ts";

interface HttpResult {
  statusCode?: number;
  headers?: Record<string, string | number | boolean>;
  body?: unknown;
}

export function middyQuotas<Event>(quotas: Quotas, options: CheckOptions<Event>): MiddlewareObj<Event, unknown> {
  const headersOf = new WeakMap<object, Record<string, string>>();
  return {
    before: async (request: Request<Event, unknown>) => {
      await quotas.syncIfStale();
      const rule = ruleOf(options, request.event);
      const decision = await quotas.checkFresh(rule, options.key(request.event), options.cost?.(request.event) ?? 1);
      const headers = decisionHeaders(decision);
      if (!decision.allowed) {
        // returning a response from `before` ends the invocation without calling the handler
        return {
          statusCode: 429,
          headers: { "content-type": "application/json", ...headers },
          body: JSON.stringify(deniedBody(rule)),
        };
      }
      if (options.headers !== false) headersOf.set(request as object, headers);
    },
    after: async (request: Request<Event, unknown>) => {
      const headers = headersOf.get(request as object);
      const response = request.response as HttpResult | undefined;
      if (!headers || !response || typeof response !== "object") return;
      response.headers = { ...headers, ...response.headers };
    },
  };
}
