// SigV4 for Function URLs with AWS_IAM auth (service "lambda"): callers need lambda:InvokeFunctionUrl and
// lambda:InvokeFunction.
import { Hash } from "@smithy/hash-node";
import { SignatureV4 } from "@smithy/signature-v4";
import type { AwsCredentialIdentity, Provider } from "@smithy/types";

export interface SignedRequest {
  url: string;
  method: string;
  headers: Record<string, string>;
  body: string;
}

/** The region of a Function URL (https://<id>.lambda-url.<region>.on.aws/), if it is one. */
export function functionUrlRegion(url: string): string | undefined {
  return /\.lambda-url\.([a-z0-9-]+)\.on\.aws$/.exec(new URL(url).hostname)?.[1];
}

export async function signRequest(
  request: SignedRequest,
  options: { region: string; credentials: AwsCredentialIdentity | Provider<AwsCredentialIdentity>; signingDate?: Date },
): Promise<SignedRequest> {
  const url = new URL(request.url);
  const signer = new SignatureV4({
    service: "lambda",
    region: options.region,
    credentials: options.credentials,
    sha256: Hash.bind(null, "sha256"),
  });
  const signed = await signer.sign(
    {
      method: request.method,
      protocol: url.protocol,
      hostname: url.hostname,
      ...(url.port ? { port: Number(url.port) } : {}),
      path: url.pathname,
      query: Object.fromEntries(url.searchParams),
      headers: { ...request.headers, host: url.host },
      body: request.body,
    },
    options.signingDate ? { signingDate: options.signingDate } : {},
  );
  return { ...request, headers: signed.headers as Record<string, string> };
}
