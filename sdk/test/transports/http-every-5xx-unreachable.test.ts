// Each test guards against a defect once found here, fixed since; its comment quotes the contract it broke.
// The HTTP transport's classification of every 5xx, with a loopback server in front of POST /v1/quotas/sync
// that applies each (instance, seq) once, as the route does.
import { createServer, type RequestListener } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { StoreUnreachableError, SyncRejectedError } from "../../src/errors.ts";
import type { QuotaRule, SyncRequest } from "../../src/protocol/index.ts";
import { createQuotas } from "../../src/quotas.ts";
import { httpTransport } from "../../src/transports/http.ts";
import { neverScheduler } from "../support/quota-fixtures.ts";

const rule: QuotaRule = {
  mode: "approximate",
  limits: [{ windowMs: 1_000, max: 1_000 }],
  leaseMs: 1_000,
  fallback: "share",
  slotGroups: 1,
};
const request: SyncRequest = {
  instanceId: "i-1",
  rule: "api",
  group: 0,
  seq: 3,
  configVersion: "v1",
  entries: [{ key: "k", usage: [[1_000, 2]], refunds: [], offered: 2, want: 0 }],
};

const closers: (() => void)[] = [];
afterEach(() => {
  for (const close of closers.splice(0)) close();
});

async function serve(listener: RequestListener): Promise<string> {
  const server = createServer(listener);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  closers.push(() => server.close());
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe("httpTransport: every 5xx is unreachable, a 4xx is an answer", () => {
  // Contract: docs/quotas.md: "Over HTTP every 5xx (500-599), a 429, a timeout or a refused connection is
  // "unreachable" (degraded mode); any other status is an answer." A 500 from the QuotaSync function (its
  // Redis client ended after an outage) was taken as an answer: HTTP clients admitted 0 % instead of their
  // degraded share.
  it("500-599 and 429 reject with StoreUnreachableError, any other 4xx with SyncRejectedError", async () => {
    let status = 500;
    const url = await serve((_req, res) => {
      res.writeHead(status, { "content-type": "application/json" }).end('{"error":{"code":"internal"}}');
    });
    for (status of [500, 501, 502, 503, 504, 505, 507, 511, 599, 429])
      await expect(httpTransport({ url }).sync(request, 0), `status ${status}`).rejects.toBeInstanceOf(
        StoreUnreachableError,
      );
    for (status of [400, 401, 403, 404, 409, 413, 422])
      await expect(httpTransport({ url }).sync(request, 0), `status ${status}`).rejects.toBeInstanceOf(
        SyncRejectedError,
      );
  });

  it("a refused connection and a timeout are unreachable", async () => {
    const closed = await serve((_req, res) => res.end());
    for (const close of closers.splice(0)) close();
    await expect(httpTransport({ url: closed, timeoutMs: 500 }).sync(request, 0)).rejects.toBeInstanceOf(
      StoreUnreachableError,
    );
    // a server that takes the request and never answers
    const silent = await serve(() => {});
    await expect(httpTransport({ url: silent, timeoutMs: 50 }).sync(request, 0)).rejects.toBeInstanceOf(
      StoreUnreachableError,
    );
  });

  // Contract: docs/decisions/0040-quotas-resend-as-is.md: "A request without an answer is sent again
  // unchanged (same sequence, same entries) until answered ... a retried sync never counts twice". A 500
  // may come after the script ran (the function failed on its reply): it is resent under the same seq.
  it("a 500 after the sync was applied: the usage is sent again under the same seq and counted once", async () => {
    const applied = new Set<string>();
    let counted = 0;
    let failures = 0;
    const url = await serve((req, res) => {
      let text = "";
      req.on("data", (chunk) => {
        text += chunk;
      });
      req.on("end", () => {
        const sent = JSON.parse(text) as SyncRequest;
        const id = `${sent.instanceId}/${sent.seq}`;
        const duplicate = applied.has(id);
        if (!duplicate) {
          applied.add(id);
          for (const e of sent.entries) for (const [, count] of e.usage) counted += count;
        }
        if (failures-- > 0) {
          res.writeHead(500, { "content-type": "application/json" }).end('{"error":{"code":"internal"}}');
          return;
        }
        const now = Date.now();
        res.writeHead(200, { "content-type": "application/json" }).end(
          JSON.stringify({
            status: duplicate ? "duplicate" : "applied",
            serverTime: now,
            configVersion: "v1",
            instances: 1,
            ...(sent.configVersion === "v1" ? {} : { rule }),
            entries: sent.entries.map((e) => ({
              mode: "approximate",
              key: e.key,
              allowance: 100,
              validUntil: now + 1_000,
              denyUntil: 0,
              resetAt: now + 1_000,
              used: [0],
            })),
          }),
        );
      });
    });
    let now = 1_000_000;
    const quotas = createQuotas({
      transport: httpTransport({ url }),
      clock: { now: () => now },
      scheduler: neverScheduler,
      rules: { api: rule },
      instancesHint: 1,
    });
    await quotas.checkFresh("api", "k", 0);
    let admitted = 0;
    for (let i = 0; i < 10; i++) if (quotas.check("api", "k").allowed) admitted++;
    failures = 1;
    for (let round = 0; round < 3; round++) {
      now += 50;
      await quotas.sync();
    }
    expect({ admitted, counted }).toEqual({ admitted: 10, counted: 10 });
  });
});
