// The HTTP transport against a local server on loopback: what it sends (JSON body, SigV4 when signing is
// configured), and how each kind of answer is classified: an outage (any 5xx, 429, no listener) vs a
// refusal (another 4xx, a body that does not parse as a reply).
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { StoreUnreachableError, SyncRejectedError } from "../../src/errors.ts";
import { type SyncRequest, WireError } from "../../src/protocol/index.ts";
import { httpTransport } from "../../src/transports/http.ts";

const request: SyncRequest = {
  instanceId: "i-1",
  rule: "api",
  group: 0,
  seq: 3,
  configVersion: "v1",
  entries: [{ key: "k", usage: [[1_000, 2]], refunds: [], offered: 2, want: 0 }],
};
const reply = {
  status: "applied",
  serverTime: 1_000,
  configVersion: "v1",
  instances: 2,
  entries: [
    { mode: "approximate", key: "k", allowance: 5, validUntil: 1_200, denyUntil: 0, resetAt: 2_000, used: [2] },
  ],
};

const servers: { close(): void }[] = [];
afterEach(() => {
  for (const server of servers.splice(0)) server.close();
});

/** A server answering every call with `status` and `body`; it records what it received. */
async function serve(status: number, body: string) {
  const seen: { path: string; headers: IncomingHttpHeaders; body: string }[] = [];
  const server = createServer((req, res) => {
    let text = "";
    req.on("data", (chunk) => {
      text += chunk;
    });
    req.on("end", () => {
      seen.push({ path: req.url ?? "", headers: req.headers, body: text });
      res.writeHead(status, { "content-type": "application/json" }).end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  servers.push({ close: () => server.close() });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

describe("httpTransport", () => {
  it("posts the request as JSON to /v1/quotas/sync and returns the validated reply", async () => {
    const { url, seen } = await serve(200, JSON.stringify(reply));
    expect(await httpTransport({ url }).sync(request, 0)).toEqual(reply);
    expect(seen[0]).toMatchObject({ path: "/v1/quotas/sync", body: JSON.stringify(request) });
    expect(seen[0]!.headers.authorization).toBeUndefined();
  });

  it("sends strict spend ages only when told the service takes them (an older check API refuses the field)", async () => {
    const { url, seen } = await serve(200, JSON.stringify(reply));
    const stamped: SyncRequest = { ...request, entries: [{ ...request.entries[0]!, spentAgo: [12] }] };
    await httpTransport({ url }).sync(stamped, 0);
    await httpTransport({ url, spendStamps: true }).sync(stamped, 0);
    expect(seen.map((s) => JSON.parse(s.body).entries[0].spentAgo)).toEqual([undefined, [12]]);
    expect(JSON.parse(seen[0]!.body)).toEqual(request);
  });

  it("signs with SigV4 (service lambda) when signing is configured", async () => {
    const { url, seen } = await serve(200, JSON.stringify(reply));
    const credentials = { accessKeyId: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY" };
    await httpTransport({ url, signing: { region: "eu-west-1", credentials } }).sync(request, 0);
    expect(seen[0]!.headers.authorization).toMatch(
      /^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE\/\d{8}\/eu-west-1\/lambda\/aws4_request/,
    );
    expect(seen[0]!.headers["x-amz-date"]).toMatch(/^\d{8}T\d{6}Z$/);
  });

  it("503 and 429 are the store being unreachable; another error status is a refusal", async () => {
    for (const status of [503, 429]) {
      const { url } = await serve(status, '{"error":{"code":"store_unavailable"}}');
      await expect(httpTransport({ url }).sync(request, 0)).rejects.toBeInstanceOf(StoreUnreachableError);
    }
    const { url } = await serve(400, '{"error":{"code":"invalid_request","path":"entries"}}');
    await expect(httpTransport({ url }).sync(request, 0)).rejects.toBeInstanceOf(SyncRejectedError);
  });

  it("nobody listening is unreachable", async () => {
    const { url } = await serve(200, "{}");
    servers.splice(0).forEach((s) => {
      s.close();
    });
    await new Promise((resolve) => setTimeout(resolve, 10));
    await expect(httpTransport({ url, timeoutMs: 500 }).sync(request, 0)).rejects.toBeInstanceOf(StoreUnreachableError);
  });

  it("a body that is not a valid reply is refused, naming the field", async () => {
    const cases: [string, RegExp][] = [
      ["not json", /reply: not JSON/],
      [JSON.stringify({ ...reply, extra: 1 }), /reply/],
      [JSON.stringify({ ...reply, entries: [{ ...reply.entries[0], allowance: "5" }] }), /reply\.entries\.0/],
      [JSON.stringify({ ...reply, entries: [{ ...reply.entries[0], key: "other" }] }), /request's keys/],
    ];
    for (const [body, message] of cases) {
      const { url } = await serve(200, body);
      const failure = httpTransport({ url }).sync(request, 0);
      await expect(failure).rejects.toBeInstanceOf(WireError);
      await expect(failure).rejects.toThrow(message);
    }
  });
});
