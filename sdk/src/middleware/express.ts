// Express middleware: each request is decided locally (no I/O); a denied one gets 429 with Retry-After.
// A key this instance has no allowance for (new, or spent while the store may have more) waits for one
// sync of its slot group first (Quotas.decide), so no request under its limit is denied for want of one.
// The sync loop runs on its own timers: call quotas.start() once at startup.
import type { NextFunction, Request, RequestHandler, Response } from "express";
import type { Decision } from "../decision.ts";
import type { Quotas } from "../quotas.ts";
import { type CheckOptions, decisionHeaders, deniedBody, ruleOf } from "./options.ts";

export function expressQuotas(quotas: Quotas, options: CheckOptions<Request>): RequestHandler {
  return (request: Request, response: Response, next: NextFunction) => {
    const rule = ruleOf(options, request);
    const answer = (decision: Readonly<Decision>) => {
      if (options.headers !== false || !decision.allowed) response.set(decisionHeaders(decision));
      if (decision.allowed) return next();
      response.status(429).json(deniedBody(rule));
    };
    const decision = quotas.decide(rule, options.key(request), options.cost?.(request) ?? 1);
    if (decision instanceof Promise) decision.then(answer).catch(next);
    else answer(decision);
  };
}
