// A sync waits QUOTA_SYNC_TIMEOUT_MS for Redis, not the per-check CHECK_TIMEOUT_MS: Redis paused longer
// than a check's budget answers a sync (200), while a check in the same pause is a 503. Its own cluster:
// the pause would stall every other test's calls.
import { Redis } from "ioredis";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { startCluster, stopCluster } from "../../../scripts/redis-cluster.ts";
import type { SyncRequest } from "../../../sdk/src/protocol/index.ts";
import { basePort } from "../../support/cluster.ts";
import { testStack, uploadRules } from "../../support/pipeline.ts";
import { signedFetch } from "../../support/signed-fetch.ts";

const PORT = basePort + 40;
const PRIMARIES = [PORT, PORT + 1, PORT + 2];
const CHECK_TIMEOUT_MS = 50;
// well past the pause on a loaded machine; the pause well past a check's budget
const QUOTA_SYNC_TIMEOUT_MS = 2_000;
const PAUSE_MS = 300;

let stack: LocalStack;
beforeAll(async () => {
  await startCluster({ basePort: PORT });
  stack = await testStack({
    redisBasePort: PORT,
    environment: { REFRESH_SECONDS: "0" },
    checkApiEnvironment: {
      CHECK_TIMEOUT_MS: String(CHECK_TIMEOUT_MS),
      QUOTA_SYNC_TIMEOUT_MS: String(QUOTA_SYNC_TIMEOUT_MS),
    },
  });
  await uploadRules(
    stack,
    {
      version: "deadline.1",
      channels: ["push"],
      segments: [],
      default: { name: "rest", caps: {} },
      quotas: [{ name: "api", mode: "strict", limits: [{ window: "1s", max: 100 }] }],
    },
    {},
  );
}, 120_000);
afterAll(async () => {
  await stack.stop();
  await stopCluster({ basePort: PORT });
});

let seq = 0;
const sync = async () => {
  const request: SyncRequest = {
    instanceId: "i-deadline",
    rule: "api",
    group: 0,
    seq: ++seq,
    configVersion: "",
    entries: [{ key: "k", usage: [], refunds: [], offered: 1, want: 1 }],
  };
  const response = await signedFetch(`${stack.endpoints.quotaSyncUrl}/v1/quotas/sync`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(request),
  });
  return { status: response.status, body: (await response.json()) as { status?: string } };
};
const check = async () => {
  const response = await signedFetch(`${stack.endpoints.functionUrl}/v1/limit`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ key: "deadline", algorithm: "fixed-window", max: 10, windowMs: 60_000 }),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
};

/** Every primary stops answering for `PAUSE_MS` (CLIENT PAUSE ALL), from about now. */
async function pausePrimaries(): Promise<void> {
  await Promise.all(
    PRIMARIES.map(async (port) => {
      const redis = new Redis({ host: "127.0.0.1", port, lazyConnect: true });
      await redis.connect();
      await redis.call("CLIENT", "PAUSE", String(PAUSE_MS), "ALL");
      redis.disconnect();
    }),
  );
}

it("answers a sync Redis answers after the per-check budget, while a check then is a 503", async () => {
  // warm: the rule published, connections open, each route answered once
  let warm = await sync();
  for (let i = 0; i < 20 && !(warm.status === 200 && warm.body.status === "applied"); i++) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    warm = await sync();
  }
  expect(warm).toMatchObject({ status: 200, body: { status: "applied" } });
  expect((await check()).status).toBe(200);

  await pausePrimaries();
  expect(await sync()).toMatchObject({ status: 200, body: { status: "applied" } });

  await pausePrimaries();
  const during = await check();
  expect(during.status).toBe(503);
  expect(during.body).toMatchObject({ error: { code: "store_unavailable" } });
});
