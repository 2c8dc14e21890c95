// The local Function URL's SigV4 check, as AWS does it: a request signed by a known key passes with its
// principal; a wrong secret, an unknown key, another body, an unsigned host or a date 15 minutes off fail.
import { describe, expect, it } from "vitest";
import { SigV4Verifier } from "../../../scripts/local/sigv4-verify.ts";
import { signRequest } from "../../../scripts/sign-request.ts";

const key = { accessKeyId: "AKIDA", secretAccessKey: "secret-a", principalArn: "arn:aws:iam::111111111111:user/a" };
// pinned: the signing date every request below is signed at, and the verifiers' clocks are set from it
const signingDate = new Date(Date.UTC(2026, 10, 22, 5, 0, 0));
const url = "http://127.0.0.1:8787/v1/limit";
const body = '{"key":"k"}';

async function signed(credentials = key, date = signingDate) {
  const request = await signRequest(
    { url, method: "POST", headers: { "content-type": "application/json" }, body },
    { region: "us-east-1", credentials, signingDate: date },
  );
  const headers = Object.fromEntries(Object.entries(request.headers).map(([k, v]) => [k.toLowerCase(), v]));
  return { method: "POST", target: "/v1/limit", headers, body };
}

describe("SigV4Verifier", () => {
  const verifier = new SigV4Verifier([key], () => signingDate.getTime() + 60_000);

  it("passes a request signed by a known key, with its principal", async () => {
    expect(await verifier.verify(await signed())).toMatchObject({
      ok: true,
      iam: { userArn: key.principalArn, accountId: "111111111111" },
    });
  });

  it("refuses a wrong secret, an unknown key, another body, a dropped signed header and no signature", async () => {
    expect(await verifier.verify(await signed({ ...key, secretAccessKey: "guessed" }))).toMatchObject({ ok: false });
    expect(await verifier.verify(await signed({ ...key, accessKeyId: "AKIDX" }))).toMatchObject({
      ok: false,
      reason: "unknown access key",
    });
    expect(await verifier.verify({ ...(await signed()), body: '{"key":"j"}' })).toMatchObject({ ok: false });
    const request = await signed();
    const { "content-type": _, ...without } = request.headers;
    expect(await verifier.verify({ ...request, headers: without })).toMatchObject({ ok: false });
    expect(await verifier.verify({ ...request, headers: {} })).toMatchObject({ ok: false });
  });

  it("refuses a signature dated more than 15 minutes from its clock, either way", async () => {
    const late = new SigV4Verifier([key], () => signingDate.getTime() + 15 * 60_000 + 1_000);
    const early = new SigV4Verifier([key], () => signingDate.getTime() - 15 * 60_000 - 1_000);
    expect(await late.verify(await signed())).toMatchObject({ ok: false, reason: "signature expired" });
    expect(await early.verify(await signed())).toMatchObject({ ok: false, reason: "signature expired" });
  });
});
