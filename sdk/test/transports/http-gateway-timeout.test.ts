// Each test guards against a defect once found here, fixed since; its comment quotes the contract it broke.
// The HTTP transport's classification of a gateway's answer, with a loopback server standing in for
// the Function URL in front of POST /v1/quotas/sync: it applies each (instance, seq) once, as the route
// does, and its gateway answers 504 the first time (the function ran, the answer did not come in time).
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import type { QuotaRule, SyncRequest } from "../../src/protocol/index.ts";
import { createQuotas } from "../../src/quotas.ts";
import { httpTransport } from "../../src/transports/http.ts";
import { neverScheduler } from "../support/quota-fixtures.ts";

const rule: QuotaRule = {
  mode: "approximate",
  limits: [{ windowMs: 1_000, max: 1_000 }],
  leaseMs: 1_000,
  fallback: "deny",
  slotGroups: 1,
};

const closers: (() => void)[] = [];
afterEach(() => {
  for (const close of closers.splice(0)) close();
});

describe("httpTransport behind a gateway", () => {
  // Contract: docs/api.md: "A replay of the same (instanceId, seq) answers "status": "duplicate" and counts
  // nothing. A 503 store_unavailable means Redis did not answer; the client sends the same seq again.";
  // docs/quotas.md: "A request that got no answer is sent again as is (same sequence number, same entries)
  // ... so a retried sync never counts twice"; wire.ts: a request given up on may be resent under a new
  // seq only without its refunds and strict spent tokens. A 504 (Gateway Timeout: what a Function URL
  // answers when the function outlives the request's timeout) says the store's answer did not come back,
  // not that the store refused: the transport classifies it as a refusal, the SDK sends the usage again
  // under a new seq, and the route counts it twice.
  it("a 504 from the gateway after the sync was applied: the usage is sent again under the same seq and counted once", async () => {
    const applied = new Set<string>();
    let counted = 0;
    let gatewayTimeouts = 1;
    const server = createServer((req, res) => {
      let text = "";
      req.on("data", (chunk) => {
        text += chunk;
      });
      req.on("end", () => {
        const request = JSON.parse(text) as SyncRequest;
        const id = `${request.instanceId}/${request.seq}`;
        const duplicate = applied.has(id);
        if (!duplicate) {
          applied.add(id);
          for (const e of request.entries) for (const [, count] of e.usage) counted += count;
        }
        if (gatewayTimeouts-- > 0) {
          res.writeHead(504, { "content-type": "application/json" }).end('{"message":"Service Unavailable"}');
          return;
        }
        const now = Date.now();
        res.writeHead(200, { "content-type": "application/json" }).end(
          JSON.stringify({
            status: duplicate ? "duplicate" : "applied",
            serverTime: now,
            configVersion: "v1",
            instances: 1,
            ...(request.configVersion === "v1" ? {} : { rule }),
            entries: request.entries.map((e) => ({
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
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    closers.push(() => server.close());
    let now = 1_000_000;
    const quotas = createQuotas({
      transport: httpTransport({ url: `http://127.0.0.1:${port}` }),
      clock: { now: () => now },
      scheduler: neverScheduler,
      rules: { api: rule },
      instancesHint: 1,
    });
    gatewayTimeouts = 0;
    await quotas.checkFresh("api", "k", 0);
    let admitted = 0;
    for (let i = 0; i < 10; i++) if (quotas.check("api", "k").allowed) admitted++;
    // the round that reports the 10: applied, then the gateway answers 504; the next rounds are answered
    gatewayTimeouts = 1;
    for (let round = 0; round < 3; round++) {
      now += 50;
      await quotas.sync();
    }
    expect({ admitted, counted }).toEqual({ admitted: 10, counted: 10 });
  });
});
