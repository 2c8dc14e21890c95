// The adoption path end to end: an Express service with the SDK, whose HTTP transport syncs through the
// real check API (its local quota-sync URL, the real handler, POST /v1/quotas/sync) with the real cluster,
// the rule coming from the policy in the S3 emulator. The stack starts before any policy exists and keeps
// the default refresh interval, as a deployed container does.
import type { AddressInfo } from "node:net";
import express from "express";
import { afterAll, beforeAll, expect, it } from "vitest";
import { LOCAL_SIGNING } from "../../../scripts/local/local-principals.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { testStack, uploadRules } from "../../../test/support/pipeline.ts";
import { expressQuotas } from "../../src/middleware/express.ts";
import { createQuotas } from "../../src/quotas.ts";
import { httpTransport } from "../../src/transports/http.ts";

const policy = (version: string, rules: string[]) => ({
  version,
  channels: ["push"],
  segments: [],
  default: { name: "rest", caps: {} },
  quotas: rules.map((name) => ({ name, mode: "approximate", limits: [{ window: "1m", max: 6 }] })),
});

let stack: LocalStack;
beforeAll(async () => {
  stack = await testStack();
  await uploadRules(stack, policy("sdk-e2e.1", ["api"]), {});
});
afterAll(async () => {
  await stack.stop();
});

/** Ten requests for `key` under `rule` through a real Express server, one sync after each; their statuses. */
async function tenRequests(rule: string, key: string): Promise<{ statuses: number[]; last: unknown }> {
  const quotas = createQuotas({
    transport: httpTransport({ url: stack.endpoints.quotaSyncUrl, signing: LOCAL_SIGNING }),
  });
  const app = express();
  app.use(expressQuotas(quotas, { rule, key: (req) => String(req.headers["x-api-key"]) }));
  app.get("/hello", (_req, res) => {
    res.json({ hello: "world" });
  });
  const server = app.listen(0, "127.0.0.1");
  await new Promise((resolve) => server.once("listening", resolve));
  try {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hello`;
    // warm the key: its first allowance and the rule come from the check API
    quotas.resolve(rule, key);
    await quotas.sync();
    const statuses: number[] = [];
    for (let i = 0; i < 10; i++) {
      statuses.push((await fetch(url, { headers: { "x-api-key": key } })).status);
      await quotas.sync();
    }
    return { statuses, last: { ...quotas.check(rule, key) } };
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
}

it("an Express service admits from allowances synced over HTTP, never more than the policy's max", async () => {
  // the policy was uploaded after the container's warm-up found none: its first sync must see it
  const { statuses, last } = await tenRequests("api", "tenant-1");
  // one instance holds the whole demand: 6 admitted in the 1 min window (the test takes seconds, so none leaves it), then denials
  expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 429, 429, 429, 429]);
  expect(last).toMatchObject({ allowed: false, limit: 6, policy: "6;w=60" });
});

it("a rule added to the policy a warm container already serves is answered at its first sync, not norule", async () => {
  // the container holds sdk-e2e.1 (read by the test above) for its 60 s refresh interval
  await uploadRules(stack, policy("sdk-e2e.2", ["api", "api-new"]), {});
  const { statuses } = await tenRequests("api-new", "tenant-2");
  expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 429, 429, 429, 429]);
});
