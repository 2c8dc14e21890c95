// What a check API function serves, a contract between the handler and the stack (infra/functions.ts).

/**
 * A check API function's routes (its `CHECK_API_ROUTES` variable): `all`, the check API; `quota-sync`,
 * `POST /v1/quotas/sync` alone, every other route 404. IAM cannot narrow a Function URL grant to a path, so
 * Quotas clients outside the VPC are granted the URL of a function of their own (`grantQuotaSync`), the same
 * code deployed with `quota-sync`: it can reach no limit and no user's caps, and its concurrency is its own,
 * so a fleet's syncs never take the check API's reserved concurrency.
 */
export const CHECK_API_ROUTES = ["all", "quota-sync"] as const;
export type CheckApiRoutes = (typeof CHECK_API_ROUTES)[number];
