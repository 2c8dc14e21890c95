// The local Function URL's AWS_IAM auth: a request's SigV4 signature (service "lambda") checked against the
// configured local credentials, as AWS checks it before invoking the function, and the caller it proves
// (the requestContext.authorizer.iam of the event). A request unsigned, signed by an unknown key, with a
// wrong signature, a body that is not the signed one, or a date more than 15 minutes off is refused.
import { createHash, timingSafeEqual } from "node:crypto";
import { Hash } from "@smithy/hash-node";
import { SignatureV4 } from "@smithy/signature-v4";
import type { APIGatewayEventRequestContextIAMAuthorizer } from "aws-lambda";

/** A local access key and the principal it stands for (as an IAM user's or a role session's key would). */
export interface LocalCredential {
  accessKeyId: string;
  secretAccessKey: string;
  /** The caller's ARN the function sees (`requestContext.authorizer.iam.userArn`). */
  principalArn: string;
}

/** AWS refuses a signature dated more than 15 minutes from its clock. */
const MAX_SKEW_MS = 15 * 60_000;
const AUTHORIZATION =
  /^AWS4-HMAC-SHA256 Credential=([^/,\s]+)\/(\d{8})\/([a-z0-9-]+)\/lambda\/aws4_request,\s*SignedHeaders=([a-z0-9;-]+),\s*Signature=([0-9a-f]{64})$/;

export interface SignedHttpRequest {
  method: string;
  /** The request target as received: path and query. */
  target: string;
  /** Header names in lower case. */
  headers: Record<string, string>;
  body: string;
}

export type Verification =
  | { ok: true; iam: APIGatewayEventRequestContextIAMAuthorizer["iam"] }
  | { ok: false; reason: string };

/** The account of an IAM or STS ARN (`arn:aws:iam::<account>:...`). */
const accountOf = (arn: string) => arn.split(":")[4] ?? "";

/** `20261122T050000Z` as a Date, or undefined. */
function amzDate(text: string | undefined): Date | undefined {
  const match = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(text ?? "");
  if (!match) return undefined;
  const [, y, mo, d, h, mi, s] = match.map(Number) as number[];
  return new Date(Date.UTC(y as number, (mo as number) - 1, d, h, mi, s));
}

export class SigV4Verifier {
  private readonly byKey: ReadonlyMap<string, LocalCredential>;

  constructor(
    credentials: readonly LocalCredential[],
    private readonly now: () => number = Date.now,
  ) {
    this.byKey = new Map(credentials.map((credential) => [credential.accessKeyId, credential]));
  }

  async verify(request: SignedHttpRequest): Promise<Verification> {
    const match = AUTHORIZATION.exec(request.headers.authorization ?? "");
    if (!match) return { ok: false, reason: "missing or malformed SigV4 Authorization header" };
    const [, accessKeyId, day, region, signedList, signature] = match as unknown as string[];
    const credential = this.byKey.get(accessKeyId as string);
    if (!credential) return { ok: false, reason: "unknown access key" };
    const date = amzDate(request.headers["x-amz-date"]);
    if (!date || request.headers["x-amz-date"]?.slice(0, 8) !== day) return { ok: false, reason: "bad x-amz-date" };
    if (Math.abs(this.now() - date.getTime()) > MAX_SKEW_MS) return { ok: false, reason: "signature expired" };
    const signedHeaders = (signedList as string).split(";");
    if (!signedHeaders.includes("host")) return { ok: false, reason: "host is not signed" };
    // the signer takes a declared payload hash as it is: the body must be the one it names
    const declared = request.headers["x-amz-content-sha256"];
    const bodyHash = createHash("sha256").update(request.body, "utf8").digest("hex");
    if (declared !== undefined && declared !== bodyHash) return { ok: false, reason: "body is not the signed one" };
    const headers: Record<string, string> = {};
    for (const name of signedHeaders) {
      const value = request.headers[name];
      if (value === undefined) return { ok: false, reason: `signed header ${name} is missing` };
      headers[name] = value;
    }
    const [path, query = ""] = request.target.split("?", 2) as [string, string?];
    const signer = new SignatureV4({
      service: "lambda",
      region: region as string,
      credentials: { accessKeyId: credential.accessKeyId, secretAccessKey: credential.secretAccessKey },
      sha256: Hash.bind(null, "sha256"),
      applyChecksum: declared !== undefined,
    });
    const expected = await signer.sign(
      {
        method: request.method,
        protocol: "http:",
        hostname: (headers.host as string).split(":")[0] as string,
        path,
        query: Object.fromEntries(new URLSearchParams(query)),
        headers,
        body: request.body,
      },
      { signingDate: date, signableHeaders: new Set(signedHeaders) },
    );
    const computed = /Signature=([0-9a-f]{64})/.exec(String(expected.headers.authorization ?? ""))?.[1] ?? "";
    const given = Buffer.from(signature as string, "hex");
    if (computed.length !== 64 || !timingSafeEqual(Buffer.from(computed, "hex"), given))
      return { ok: false, reason: "signature does not match" };
    return { ok: true, iam: iamContextOf(credential) };
  }
}

/** The requestContext.authorizer.iam of a request `credential` signed. */
export function iamContextOf(credential: LocalCredential): APIGatewayEventRequestContextIAMAuthorizer["iam"] {
  return {
    accessKey: credential.accessKeyId,
    accountId: accountOf(credential.principalArn),
    callerId: credential.accessKeyId,
    cognitoIdentity: null,
    principalOrgId: "",
    userArn: credential.principalArn,
    userId: credential.accessKeyId,
  };
}
