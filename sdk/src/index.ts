// @tollgate/quotas: rate limits decided inside the calling service from local allowances, kept fresh by a
// sync with the Tollgate store every ~50 ms. Middleware: @tollgate/quotas/express, /fastify, /middy.
export { type Clock, type Scheduler, systemClock, unrefScheduler } from "./clock.ts";
export type { Decision } from "./decision.ts";
export {
  QuotaRuleGoneError,
  QuotasArgumentError,
  QuotasConfigError,
  QuotasError,
  StoreUnreachableError,
  SyncRejectedError,
} from "./errors.ts";
export type { QuotaFallback, QuotaLimit, QuotaMode, QuotaRule, SyncReply, SyncRequest } from "./protocol/index.ts";
export { createQuotas, Quotas, type QuotasMetrics, type QuotasOptions, type QuotaTransport } from "./quotas.ts";
export type { QuotaHandle } from "./state.ts";
