// Tenants for the check API's handler tests: the IAM context a signed caller's event carries, and a
// tenancy in which the local principal may do everything (what the local stack's policies give it).
import type { APIGatewayEventRequestContextIAMAuthorizer } from "aws-lambda";
import { Tenancy } from "../../functions/core/shared/tenants.ts";
import { LOCAL_PRINCIPAL_ARN, localTenant } from "../../scripts/local/local-principals.ts";

export type IamContext = APIGatewayEventRequestContextIAMAuthorizer["iam"];

/** The requestContext.authorizer.iam of a request signed as `arn`. */
export function iamOf(arn: string): IamContext {
  const accountId = arn.split(":")[4] ?? "";
  return {
    accessKey: "AKIDEXAMPLE",
    accountId,
    callerId: "AIDAEXAMPLE",
    cognitoIdentity: null,
    principalOrgId: "",
    userArn: arn,
    userId: "AIDAEXAMPLE",
  };
}

/** The local principal's IAM context. */
export const localIam = iamOf(LOCAL_PRINCIPAL_ARN);

/** A tenancy in which the local principal may do every operation (and sync `quotaRules`). */
export const localTenancy = (quotaRules: readonly string[] = []) => new Tenancy([localTenant(quotaRules)]);
