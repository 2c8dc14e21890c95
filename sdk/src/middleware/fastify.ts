// Fastify onRequest hook: each request is decided locally (no I/O); a denied one gets 429 with
// Retry-After. A key this instance has no allowance for waits for one sync of its slot group first
// (Quotas.decide). `app.addHook("onRequest", fastifyQuotas(quotas, options))`; call quotas.start() once.
import type { FastifyReply, FastifyRequest, onRequestHookHandler } from "fastify";
import type { Decision } from "../decision.ts";
import type { Quotas } from "../quotas.ts";
import { type CheckOptions, decisionHeaders, deniedBody, ruleOf } from "./options.ts";

export function fastifyQuotas(quotas: Quotas, options: CheckOptions<FastifyRequest>): onRequestHookHandler {
  return (request: FastifyRequest, reply: FastifyReply, done: (error?: Error) => void) => {
    const rule = ruleOf(options, request);
    const answer = (decision: Readonly<Decision>) => {
      if (options.headers !== false || !decision.allowed) reply.headers(decisionHeaders(decision));
      if (decision.allowed) return done();
      reply.code(429).send(deniedBody(rule));
    };
    const decision = quotas.decide(rule, options.key(request), options.cost?.(request) ?? 1);
    if (decision instanceof Promise) decision.then(answer).catch((error: Error) => done(error));
    else answer(decision);
  };
}
