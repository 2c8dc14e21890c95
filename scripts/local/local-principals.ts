// The local stack's callers: the access keys its Function URLs accept (AWS_IAM auth, checked by
// sigv4-verify.ts) and the principals they stand for, and the tenant a local policy gives them
// (docs/tenants.md). The CLI's `--local` signs with the first; tests add keys of their own tenants.
import { OPERATIONS } from "../../functions/core/shared/tenants.ts";
import { functionUrlEvent } from "./function-url-server.ts";
import { iamContextOf, type LocalCredential } from "./sigv4-verify.ts";

/** The local stack's own principal: the CLI, the demo and the docs' examples call as it. */
export const LOCAL_PRINCIPAL_ARN = "arn:aws:iam::000000000000:user/tollgate-local";

/** The key that signs as LOCAL_PRINCIPAL_ARN (the emulator's AWS credentials too: any are accepted there). */
export const LOCAL_CREDENTIAL: LocalCredential = {
  accessKeyId: "local",
  secretAccessKey: "local",
  principalArn: LOCAL_PRINCIPAL_ARN,
};

/** The IAM context of a request the local principal signed (for events built without the URL server). */
export const LOCAL_IAM = iamContextOf(LOCAL_CREDENTIAL);

/** The local stack's region, which its URLs' signatures name. */
export const LOCAL_REGION = "us-east-1";

/** What an SDK's httpTransport signs local requests with (`signing`). */
export const LOCAL_SIGNING = { region: LOCAL_REGION, credentials: LOCAL_CREDENTIAL };

/** A tenant for the local principal with every operation, syncing `quotaRules` (a local policy's). */
export function localTenant(quotaRules: readonly string[]) {
  return {
    name: "local",
    namespace: "local",
    principals: [LOCAL_PRINCIPAL_ARN],
    operations: quotaRules.length > 0 ? [...OPERATIONS] : OPERATIONS.filter((op) => op !== "quota-sync"),
    ...(quotaRules.length > 0 ? { quotaRules: [...quotaRules] } : {}),
  };
}

/** `policy` with the local tenant added, unless it names tenants of its own. */
export function withLocalTenant<P extends object>(policy: P): P & { tenants: readonly unknown[] } {
  const { quotas, tenants } = policy as { quotas?: readonly unknown[]; tenants?: readonly unknown[] };
  if (tenants !== undefined) return policy as P & { tenants: readonly unknown[] };
  const rules = (quotas ?? []).map((rule) => (rule as { name?: unknown }).name).filter((n) => typeof n === "string");
  return { ...policy, tenants: [localTenant(rules as string[])] };
}

/** A POST to `path` as the local Function URL hands it to its function when the local principal signed it. */
export const localPrincipalEvent = (path: string, body: string) =>
  functionUrlEvent("POST", path, body, {}, "127.0.0.1", LOCAL_IAM);
