// SigV4 signing for Function URLs (service "lambda"), with fixed credentials and date.
import { describe, expect, it } from "vitest";
import { functionUrlRegion, signRequest } from "../../../scripts/sign-request.ts";

// pinned: the signing time the signer is given (the signature and x-amz-date follow from it)
const SIGNED_AT = new Date(Date.UTC(2026, 10, 22, 8, 0, 0));

describe("signRequest", () => {
  it("signs for the lambda service in the URL's region", async () => {
    const url = "https://abcdefghijklmnop.lambda-url.eu-west-1.on.aws/v1/limit";
    expect(functionUrlRegion(url)).toBe("eu-west-1");
    expect(functionUrlRegion("http://127.0.0.1:8787/v1/limit")).toBeUndefined();
    const signed = await signRequest(
      { url, method: "POST", headers: { "content-type": "application/json" }, body: '{"key":"k"}' },
      {
        region: "eu-west-1",
        credentials: {
          accessKeyId: "AKIDEXAMPLE",
          secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
          sessionToken: "token",
        },
        signingDate: SIGNED_AT,
      },
    );
    expect(signed.headers.authorization).toMatch(
      /^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE\/20261122\/eu-west-1\/lambda\/aws4_request, SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date;x-amz-security-token, Signature=[0-9a-f]{64}$/,
    );
    expect(signed.headers["x-amz-date"]).toBe("20261122T080000Z");
    expect(signed.headers["x-amz-security-token"]).toBe("token");
    // the same request signed twice gives the same signature; another body does not
    const again = await signRequest(
      { url, method: "POST", headers: { "content-type": "application/json" }, body: '{"key":"k"}' },
      {
        region: "eu-west-1",
        credentials: {
          accessKeyId: "AKIDEXAMPLE",
          secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
          sessionToken: "token",
        },
        signingDate: SIGNED_AT,
      },
    );
    expect(again.headers.authorization).toBe(signed.headers.authorization);
  });
});
