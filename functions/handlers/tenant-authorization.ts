// Who is calling, and may they: the caller's IAM principal from the Function URL's request context (AWS
// fills it in after checking the SigV4 signature; the local Function URL server does the same), the
// operation a route's request asks for, and the 403 that names which check failed. Runs before anything
// is read or written for the request (docs/tenants.md).
import type { APIGatewayEventRequestContextIAMAuthorizer, APIGatewayProxyEventV2 } from "aws-lambda";
import type { Intent, Principal, Tenancy, Tenant } from "../core/shared/tenants.ts";
import { HttpError } from "./http.ts";

/** The signed caller of a Function URL request with AWS_IAM auth; undefined when the event has none. */
export function principalOf(event: APIGatewayProxyEventV2): Principal | undefined {
  const context = event.requestContext as { authorizer?: Partial<APIGatewayEventRequestContextIAMAuthorizer> };
  const iam = context.authorizer?.iam;
  if (typeof iam?.userArn !== "string" || iam.userArn === "") return undefined;
  return typeof iam.accountId === "string" ? { arn: iam.userArn, accountId: iam.accountId } : { arn: iam.userArn };
}

/** A body's charge is zero only when it says `cost: 0` (the default cost is 1). */
const charges = (cost: unknown) => cost !== 0;

/**
 * What a request to `path` asks to do, read from the raw body before validation (a body the route would
 * refuse still needs the operation its route stands for); undefined for a route of no tenant (health).
 */
export function intentOf(path: string, body: Record<string, unknown>): Intent | undefined {
  switch (path) {
    case "/v1/limit":
      return { operation: "limit", changes: charges(body.cost) };
    case "/v1/limits": {
      const limits = Array.isArray(body.limits) ? (body.limits as unknown[]) : [undefined];
      const changes = limits.some((limit) => {
        const own = typeof limit === "object" && limit !== null ? (limit as { cost?: unknown }).cost : undefined;
        return charges(own === undefined ? body.cost : own);
      });
      return { operation: "limits", changes };
    }
    case "/v1/frequency":
      return body.consume === true
        ? { operation: "frequency-consume", changes: true }
        : { operation: "frequency-check", changes: false };
    case "/v1/quotas/sync":
      return typeof body.rule === "string"
        ? { operation: "quota-sync", changes: true, rule: body.rule }
        : { operation: "quota-sync", changes: true };
    default:
      return undefined;
  }
}

/** The request's tenant, or HttpError 403 with the refusal's code (`unknown_principal`, ...). */
export function authorizeRequest(tenancy: Tenancy, principal: Principal | undefined, intent: Intent): Tenant {
  const decision = tenancy.authorize(principal, intent);
  if ("code" in decision) throw new HttpError(403, decision.code, decision.message);
  return decision;
}
