// A Lambda execution environment in a child process: a middy handler with the SDK (HTTP transport to a
// local sync endpoint answered by the fake store), invoked a few times. It prints what it saw and then
// must end on its own: anything the SDK left running (a timer, a pending sync) would keep it alive.
import { createServer } from "node:http";
import middy from "@middy/core";
import { middyQuotas } from "../../src/middleware/middy.ts";
import type { QuotaRule, SyncRequest } from "../../src/protocol/index.ts";
import { createQuotas } from "../../src/quotas.ts";
import { httpTransport } from "../../src/transports/http.ts";
import { fakeStore } from "./fake-store.ts";

const rule: QuotaRule = {
  mode: "approximate",
  limits: [{ windowMs: 1_000, max: 100 }],
  leaseMs: 60_000,
  fallback: "deny",
  slotGroups: 1,
};
const store = fakeStore({ rule, amount: 2 });
const server = createServer((request, response) => {
  let body = "";
  request.on("data", (chunk) => {
    body += chunk;
  });
  request.on("end", async () => {
    const reply = await store.transport.sync(JSON.parse(body) as SyncRequest, Date.now());
    response.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(reply));
  });
});
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
const address = server.address();
const url = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`;

// syncIntervalMs 1: every invocation finds the last sync stale and syncs at its boundary
const quotas = createQuotas({ transport: httpTransport({ url }), rules: { api: rule }, syncIntervalMs: 1 });
const handler = middy<{ key: string }, { statusCode: number }>()
  .use(middyQuotas<{ key: string }>(quotas, { rule: "api", key: (event) => event.key }))
  .handler(async () => ({ statusCode: 200 }));

const timers = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
const results: { status: number; timersAfter: number }[] = [];
const timersBefore = timers();
for (let i = 0; i < 3; i++) {
  await new Promise((resolve) => setTimeout(resolve, 2));
  const response = (await handler({ key: "alice" }, {} as never)) as { statusCode: number };
  results.push({ status: response.statusCode, timersAfter: timers() });
}
server.closeAllConnections();
server.close();
console.log(JSON.stringify({ timersBefore, results, syncs: store.calls.length }));
