// Requests to the local stack's Function URLs, signed as a Function URL with AWS_IAM auth wants them
// (SigV4, service "lambda"), by the local principal's key unless a test names another.
import { LOCAL_CREDENTIAL, LOCAL_REGION } from "../../scripts/local/local-principals.ts";
import type { LocalCredential } from "../../scripts/local/sigv4-verify.ts";
import { signRequest } from "../../scripts/sign-request.ts";

export interface SignedFetchInit {
  method?: string;
  body?: string;
  headers?: Record<string, string>;
}

export async function signedFetch(
  url: string,
  init: SignedFetchInit = {},
  credential: LocalCredential = LOCAL_CREDENTIAL,
): Promise<Response> {
  const method = init.method ?? (init.body === undefined ? "GET" : "POST");
  const headers = { ...(init.body === undefined ? {} : { "content-type": "application/json" }), ...init.headers };
  const signed = await signRequest(
    { url, method, headers, body: init.body ?? "" },
    { region: LOCAL_REGION, credentials: credential },
  );
  return fetch(url, { method, headers: signed.headers, ...(init.body === undefined ? {} : { body: init.body }) });
}
