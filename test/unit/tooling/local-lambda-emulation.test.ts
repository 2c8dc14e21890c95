// The local stack's Lambda emulation keeps Lambda's contract while doing less per invocation: the Function
// URL event's time in AWS's own format, a context whose remaining time counts down per invocation, and a
// trusted caller (the bench's unsigned load) that never stands in for a bad signature or another address.
import { request as httpRequest } from "node:http";
import type { APIGatewayProxyEventV2 } from "aws-lambda";
import { describe, expect, it } from "vitest";
import {
  functionUrlEvent,
  isLoopback,
  requestTime,
  startFunctionUrlServer,
} from "../../../scripts/local/function-url-server.ts";
import { LOCAL_CREDENTIAL, LOCAL_IAM, LOCAL_REGION } from "../../../scripts/local/local-principals.ts";
import { iamContextOf } from "../../../scripts/local/sigv4-verify.ts";
import { lambdaContext } from "../../../scripts/local/sqs-poller.ts";
import { signRequest } from "../../../scripts/sign-request.ts";

describe("the local Function URL event", () => {
  it("writes requestContext.time as a Function URL does, to the second, beside timeEpoch", () => {
    // pinned: the times the pure formatter is given
    expect(requestTime(Date.UTC(2020, 2, 12, 19, 3, 58, 999))).toBe("12/Mar/2020:19:03:58 +0000");
    expect(requestTime(Date.UTC(2026, 0, 2, 3, 4, 5))).toBe("02/Jan/2026:03:04:05 +0000");
    // the same second again, then the next one: the cache never answers another second's text
    expect(requestTime(Date.UTC(2026, 0, 2, 3, 4, 5, 500))).toBe("02/Jan/2026:03:04:05 +0000");
    expect(requestTime(Date.UTC(2026, 0, 2, 3, 4, 6))).toBe("02/Jan/2026:03:04:06 +0000");
    const event = functionUrlEvent("POST", "/v1/limit", "{}");
    const { time, timeEpoch } = event.requestContext;
    expect(time).toBe(requestTime(timeEpoch));
    expect(time).toMatch(/^\d{2}\/[A-Z][a-z]{2}\/\d{4}:\d{2}:\d{2}:\d{2} \+0000$/);
  });
});

describe("the local Function URL event's header fields", () => {
  /** The header fields the function was handed for one request with these raw fields (name, value, ...). */
  async function headersFor(raw: string[]): Promise<Record<string, string>> {
    const seen: Record<string, string>[] = [];
    const server = await startFunctionUrlServer(async (event: APIGatewayProxyEventV2) => {
      seen.push(event.headers as Record<string, string>);
      return { statusCode: 200, body: "{}" };
    });
    try {
      await new Promise<void>((resolve, reject) => {
        // given raw, Node adds no field of its own: Host is one HTTP/1.1 asks for
        const headers = ["Host", new URL(server.url).host, ...raw];
        const request = httpRequest(`${server.url}/v1/health`, { method: "GET", headers }, (response) => {
          response.resume();
          response.on("end", resolve);
        });
        request.on("error", reject).end();
      });
      return seen[0] as Record<string, string>;
    } finally {
      await server.stop();
    }
  }

  it("names each field in lower case with its value as sent", async () => {
    const headers = await headersFor(["X-Mixed-Case", "Value As Sent", "Cookie", "a=1"]);
    expect(headers).toMatchObject({ "x-mixed-case": "Value As Sent", cookie: "a=1" });
    for (const name of Object.keys(headers)) expect(name).toBe(name.toLowerCase());
  });

  it("joins a field given twice, in any case, as Node reads it, and keeps a name that Object.prototype has", async () => {
    const headers = await headersFor(["X-Twice", "1", "x-twice", "2", "Constructor", "c"]);
    expect(headers).toMatchObject({ "x-twice": "1, 2", constructor: "c" });
  });
});

describe("the local Lambda context", () => {
  it("gives each invocation its own request ID and deadline, and names the function it was made for", () => {
    const first = lambdaContext(30_000, "tollgate-check-api");
    const second = lambdaContext(0, "tollgate-check-api");
    expect(first.awsRequestId).not.toBe(second.awsRequestId);
    expect(first.functionName).toBe("tollgate-check-api");
    expect(first.invokedFunctionArn).toBe("arn:aws:lambda:local:000000000000:function:tollgate-check-api");
    expect(first.getRemainingTimeInMillis()).toBeGreaterThan(29_000);
    expect(first.getRemainingTimeInMillis()).toBeLessThanOrEqual(30_000);
    expect(second.getRemainingTimeInMillis()).toBe(0);
    // copied with an override (as a test of the consumer's time budget does), the context still works
    const copy = { ...first, getRemainingTimeInMillis: () => 5 };
    expect(copy.getRemainingTimeInMillis()).toBe(5);
    expect(copy.awsRequestId).toBe(first.awsRequestId);
    expect(lambdaContext(1_000).functionName).toBe("tollgate-campaign-consumer");
  });
});

describe("the local Function URL's trusted caller", () => {
  // pinned: the date every request is signed at, the server's clock a minute later
  const signingDate = new Date(Date.UTC(2026, 10, 22, 5, 0, 0));
  const other = {
    accessKeyId: "AKIDOTHER",
    secretAccessKey: "other",
    principalArn: "arn:aws:iam::222222222222:user/o",
  };

  /** A server trusting the local principal, whose function records the caller of every invocation. */
  async function trustingServer() {
    const callers: unknown[] = [];
    const server = await startFunctionUrlServer(
      async (event: APIGatewayProxyEventV2) => {
        callers.push((event.requestContext as { authorizer?: { iam?: unknown } }).authorizer?.iam);
        return { statusCode: 200, body: "{}" };
      },
      0,
      "tollgate-check-api",
      { credentials: [LOCAL_CREDENTIAL, other], trustedCaller: LOCAL_IAM, now: () => signingDate.getTime() + 60_000 },
    );
    return { ...server, callers };
  }

  const signed = async (url: string, credentials: typeof other) => {
    const request = await signRequest(
      { url, method: "POST", headers: { "content-type": "application/json" }, body: "{}" },
      { region: LOCAL_REGION, credentials, signingDate },
    );
    return fetch(url, { method: "POST", headers: request.headers, body: "{}" });
  };

  it("takes an unsigned request from loopback as the trusted caller, and checks every signed one", async () => {
    const server = await trustingServer();
    try {
      const url = `${server.url}/v1/limit`;
      const unsigned = await fetch(url, { method: "POST", body: "{}" });
      expect(unsigned.status).toBe(200);
      // signed by another known key: that principal, not the trusted one
      expect((await signed(url, other)).status).toBe(200);
      // signed with a secret no key has, or by a key the URL does not know: refused, the function never runs
      const forged = await signed(url, { ...other, secretAccessKey: "guessed" });
      expect(forged.status).toBe(403);
      expect(await forged.json()).toEqual({ Message: "Forbidden" });
      expect((await signed(url, { ...other, accessKeyId: "AKIDUNKNOWN" })).status).toBe(403);
      // a malformed Authorization header is a signature that does not verify, not an unsigned request
      expect(
        (await fetch(url, { method: "POST", headers: { authorization: "AWS4 nonsense" }, body: "{}" })).status,
      ).toBe(403);
      expect(server.callers).toEqual([LOCAL_IAM, iamContextOf(other)]);
    } finally {
      await server.stop();
    }
  });

  it("trusts only this machine's loopback addresses", () => {
    for (const address of ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"]) expect(isLoopback(address)).toBe(true);
    for (const address of ["10.0.0.5", "192.168.1.20", "::ffff:10.0.0.5", "fe80::1", "2001:db8::127", undefined])
      expect(isLoopback(address)).toBe(false);
  });
});
