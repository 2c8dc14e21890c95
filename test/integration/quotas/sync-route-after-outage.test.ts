// Redis stopped for longer than the QuotaSync function's reconnect attempts (its ioredis client ends), a
// policy upload meanwhile, then Redis back: POST /v1/quotas/sync answers `applied` again without a restart.
// The stack has its own cluster, so stopping it does not disturb the other tests.
import { afterAll, beforeAll, expect, it } from "vitest";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { startCluster, stopCluster } from "../../../scripts/redis-cluster.ts";
import type { SyncRequest } from "../../../sdk/src/protocol/index.ts";
import { basePort } from "../../support/cluster.ts";
import { testStack, uploadRules } from "../../support/pipeline.ts";
import { signedFetch } from "../../support/signed-fetch.ts";

// beside the suite's own cluster: two suites on one machine never share it
const OUTAGE_PORT = Number(process.env.REDIS_OUTAGE_BASE_PORT ?? basePort + 300);
// createRedisCluster's clusterRetryStrategy: 10 attempts of at most 1.5 s each (jittered); past this the
// client has ended for good unless something starts it again
const RECONNECT_BUDGET_MS = 10 * 1_500;
const policy = (version: string, max: number) => ({
  version,
  channels: ["push"],
  segments: [],
  default: { name: "rest", caps: {} },
  quotas: [{ name: "api", mode: "approximate", limits: [{ window: "1s", max }] }],
});

let stack: LocalStack;
beforeAll(async () => {
  await startCluster({ basePort: OUTAGE_PORT });
  stack = await testStack({ redisBasePort: OUTAGE_PORT, environment: { REFRESH_SECONDS: "0" } });
  await uploadRules(stack, policy("outage.1", 100), {});
}, 120_000);
afterAll(async () => {
  await stack.stop();
  await stopCluster({ basePort: OUTAGE_PORT });
});

let seq = 0;
const sync = async (): Promise<{ status: number; body: { status?: string } }> => {
  const request: SyncRequest = {
    instanceId: "i-outage",
    rule: "api",
    group: 0,
    seq: ++seq,
    configVersion: "",
    entries: [{ key: "tenant-1", usage: [], refunds: [], offered: 1, want: 0 }],
  };
  const response = await signedFetch(`${stack.endpoints.quotaSyncUrl}/v1/quotas/sync`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(request),
  });
  return { status: response.status, body: (await response.json()) as { status?: string } };
};

/** Syncs until one is answered `applied`, or the deadline passes; the last answer either way. */
async function syncUntilApplied(deadlineMs: number) {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const answer = await sync();
    if ((answer.status === 200 && answer.body.status === "applied") || Date.now() > deadline) return answer;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

it("answers applied again after Redis was stopped past the client's reconnect attempts, a policy upload meanwhile", async () => {
  // a warm container: rules published, the Redis client connected
  expect(await syncUntilApplied(10_000)).toMatchObject({ status: 200, body: { status: "applied" } });

  await stopCluster({ basePort: OUTAGE_PORT });
  // calls during the outage are answered (503), not hung
  expect((await sync()).status).toBeGreaterThanOrEqual(500);
  // idle past the reconnect attempts: the client ends
  await new Promise((resolve) => setTimeout(resolve, RECONNECT_BUDGET_MS));
  // a policy upload meanwhile: the function reloads it and tries to publish the rule while Redis is down
  await uploadRules(stack, policy("outage.2", 120), {});
  expect((await sync()).status).toBeGreaterThanOrEqual(500);

  // Redis comes back (empty: a fresh cluster on the same ports); no restart of the function
  await startCluster({ basePort: OUTAGE_PORT });
  const back = await syncUntilApplied(30_000);
  expect(back).toMatchObject({ status: 200, body: { status: "applied" } });
  // the rule of the policy uploaded during the outage, published once Redis answered
  expect((back.body as { configVersion?: string }).configVersion).toMatch(/^outage\.2\./);
}, 120_000);
