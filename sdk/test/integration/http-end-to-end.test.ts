// The adoption path end to end: an Express service with the SDK, whose HTTP transport syncs through the
// real check API (local Function URL server, real handler, POST /v1/quotas/sync) with the real cluster,
// the rule coming from the policy in the S3 emulator.
import type { AddressInfo } from "node:net";
import express from "express";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { testStack, uploadRules } from "../../../test/support/pipeline.ts";
import { expressQuotas } from "../../src/middleware/express.ts";
import { createQuotas } from "../../src/quotas.ts";
import { httpTransport } from "../../src/transports/http.ts";

let stack: LocalStack;
beforeAll(async () => {
  stack = await testStack();
  await uploadRules(
    stack,
    {
      version: "sdk-e2e.1",
      channels: ["push"],
      segments: [],
      default: { name: "rest", caps: {} },
      quotas: [{ name: "api", mode: "approximate", limits: [{ window: "1m", max: 6 }] }],
    },
    {},
  );
});
afterAll(async () => {
  await stack.stop();
});

it("an Express service admits from allowances synced over HTTP, never more than the policy's max", async () => {
  const quotas = createQuotas({ transport: httpTransport({ url: stack.endpoints.functionUrl }) });
  const app = express();
  app.use(expressQuotas(quotas, { rule: "api", key: (req) => String(req.headers["x-api-key"]) }));
  app.get("/hello", (_req, res) => {
    res.json({ hello: "world" });
  });
  const server = app.listen(0, "127.0.0.1");
  await new Promise((resolve) => server.once("listening", resolve));
  try {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hello`;
    // warm the key: its first allowance and the rule come from the check API
    quotas.resolve("api", "tenant-1");
    await quotas.sync();
    const statuses: number[] = [];
    for (let i = 0; i < 10; i++) {
      statuses.push((await fetch(url, { headers: { "x-api-key": "tenant-1" } })).status);
      await quotas.sync();
    }
    // one instance holds the whole demand: 6 admitted in the 1 min window (the test takes seconds, so none leaves it), then denials
    expect(statuses.filter((s) => s === 200)).toHaveLength(6);
    expect(statuses.slice(6)).toEqual([429, 429, 429, 429]);
    expect(quotas.check("api", "tenant-1")).toMatchObject({ allowed: false, limit: 6, policy: "6;w=60" });
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
});
