// The chaos harness's fault proxy on loopback: passes a request through, answers a 5xx, delays, or drops it,
// for every request or only those it picks.
import { createServer, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FaultProxy, startFaultProxy } from "../../../scripts/chaos/fault-proxy.ts";

let upstream: Server;
let proxy: FaultProxy;

beforeAll(async () => {
  upstream = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk) => {
      body += chunk;
    });
    request.on("end", () => response.writeHead(200, { "content-type": "text/plain" }).end(`echo ${body}`));
  });
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  const address = upstream.address();
  const port = typeof address === "object" && address ? address.port : 0;
  proxy = await startFaultProxy(() => `http://127.0.0.1:${port}`);
});

afterAll(async () => {
  await proxy.stop();
  await new Promise((resolve) => upstream.close(resolve));
});

const post = () => fetch(`${proxy.url}/v1/quotas/sync`, { method: "POST", body: "hello" });

describe("chaos fault proxy", () => {
  it("passes a request and its body through to the function and its answer back", async () => {
    proxy.fault = { kind: "pass" };
    const response = await post();
    expect([response.status, await response.text()]).toEqual([200, "echo hello"]);
  });

  it("answers the injected status without reaching the function", async () => {
    proxy.fault = { kind: "status", status: 500 };
    expect((await post()).status).toBe(500);
  });

  it("adds the injected latency before forwarding", async () => {
    proxy.fault = { kind: "latency", ms: 200 };
    const started = performance.now();
    const response = await post();
    expect(await response.text()).toBe("echo hello");
    expect(performance.now() - started).toBeGreaterThanOrEqual(195);
  });

  it("drops the connection: the client sees a failed request, not an answer", async () => {
    proxy.fault = { kind: "drop" };
    await expect(post()).rejects.toThrow();
    proxy.fault = { kind: "pass" };
  });

  it("faults only the requests it picks: the bucket's fail, the queues' of the same emulator pass", async () => {
    const address = upstream.address();
    const port = typeof address === "object" && address ? address.port : 0;
    const picky = await startFaultProxy(
      () => `http://127.0.0.1:${port}`,
      (path) => path.startsWith("/bucket"),
    );
    try {
      picky.fault = { kind: "status", status: 503 };
      expect((await fetch(`${picky.url}/bucket/config/policy.json`)).status).toBe(503);
      const queue = await fetch(`${picky.url}/`, { method: "POST", body: "receive" });
      expect([queue.status, await queue.text()]).toEqual([200, "echo receive"]);
    } finally {
      await picky.stop();
    }
  });
});
