// The check API's Function URLs, a contract between the handler and the stack (infra/functions.ts).

/**
 * The alias whose Function URL serves `POST /v1/quotas/sync` alone: IAM cannot narrow a Function URL grant
 * to a path, so Quotas clients are granted this alias's URL (`grantQuotaSync`), and the handler answers
 * nothing else there (404). The function's own URL (or the `live` alias's) serves every route.
 */
export const QUOTA_SYNC_ALIAS = "quotas";
