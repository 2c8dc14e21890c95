// What every middleware shares: which rule and key a request is checked under, its cost, and the
// response headers of a decision (RateLimit-Limit / -Remaining / -Reset / -Policy, Retry-After).
import type { Decision } from "../decision.ts";

export interface CheckOptions<Request> {
  /** The rule's name, or a function of the request (e.g. by route). */
  rule: string | ((request: Request) => string);
  /** The quota key of a request (an API key, a tenant): 1-256 characters. */
  key: (request: Request) => string;
  /** Cost of a request (default 1). */
  cost?: (request: Request) => number;
  /** Set the RateLimit headers on every response (default true). */
  headers?: boolean;
}

export function ruleOf<Request>(options: CheckOptions<Request>, request: Request): string {
  return typeof options.rule === "string" ? options.rule : options.rule(request);
}

/** The response headers of a decision, as the check API sets them. */
export function decisionHeaders(decision: Readonly<Decision>): Record<string, string> {
  const headers: Record<string, string> = {
    "RateLimit-Limit": String(decision.limit),
    "RateLimit-Reset": String(decision.resetSeconds),
    "RateLimit-Policy": decision.policy,
  };
  // an unlimited fallback has no meaningful remaining
  if (Number.isFinite(decision.remaining)) headers["RateLimit-Remaining"] = String(Math.floor(decision.remaining));
  if (!decision.allowed) headers["Retry-After"] = String(decision.retryAfterSeconds);
  return headers;
}

/** The body of a 429, in the check API's error shape. */
export function deniedBody(rule: string): { error: { code: string; message: string } } {
  return { error: { code: "rate_limited", message: `quota ${rule} exhausted` } };
}
