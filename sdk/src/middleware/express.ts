// Express middleware: each request is decided locally (no I/O); a denied one gets 429 with Retry-After.
// The sync loop runs on its own timers: call quotas.start() once at startup.
import type { NextFunction, Request, RequestHandler, Response } from "express";
import type { Quotas } from "../quotas.ts";
import { type CheckOptions, decisionHeaders, deniedBody, ruleOf } from "./options.ts";

export function expressQuotas(quotas: Quotas, options: CheckOptions<Request>): RequestHandler {
  return (request: Request, response: Response, next: NextFunction) => {
    const rule = ruleOf(options, request);
    const decision = quotas.check(rule, options.key(request), options.cost?.(request) ?? 1);
    if (options.headers !== false || !decision.allowed) response.set(decisionHeaders(decision));
    if (decision.allowed) return next();
    response.status(429).json(deniedBody(rule));
  };
}
