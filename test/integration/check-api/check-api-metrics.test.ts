// The check API handler's metrics switch, on the real cluster: with metrics on, each request is counted
// (one EMF document, the algorithm as a dimension); with POWERTOOLS_METRICS_DISABLED nothing is added,
// since without logMetrics to publish them, added metrics would pile up in the store.
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { RedisLimitStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Limiter } from "../../../functions/core/limits/limiter.ts";
import { Tenancy } from "../../../functions/core/shared/tenants.ts";
import { makeCheckApiHandler } from "../../../functions/handlers/check-api-handler.ts";
import { functionUrlEvent } from "../../../scripts/local/function-url-server.ts";
import { localTenant } from "../../../scripts/local/local-principals.ts";
import { lambdaContext } from "../../../scripts/local/sqs-poller.ts";
import { emfDocuments } from "../../support/check-api-invocation.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { localIam, localTenancy } from "../../support/tenants.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});
afterEach(() => {
  vi.unstubAllEnvs();
  vi.restoreAllMocks();
});

/** A handler whose Metrics is built under `disabled` (Powertools reads the variable at construction). */
function handlerWith(disabled: boolean, tenancy = localTenancy()) {
  vi.stubEnv("POWERTOOLS_METRICS_DISABLED", disabled ? "true" : "false");
  const metrics = new Metrics({ namespace: "Test", serviceName: "check-api" });
  const limiter = new Limiter({
    store: new RedisLimitStore(cluster, { deadlineMs: 2_000 }),
    namespace: uniqueNamespace(),
  });
  const handler = makeCheckApiHandler({
    tenancy: async () => tenancy,
    limiter,
    frequency: () => Promise.reject(new Error("not used")),
    health: () => Promise.resolve({ ok: true, redis: "ok" }),
    logger: new Logger({ serviceName: "check-api", logLevel: "ERROR" }),
    metrics,
  });
  return { metrics, handler };
}

const limit = JSON.stringify({ key: "k", algorithm: "fixed-window", max: 5, windowMs: 60_000 });

describe("check API metrics", () => {
  it("counts each request with its algorithm when metrics are on, and publishes one document per request", async () => {
    const { metrics, handler } = handlerWith(false);
    const printed = emfDocuments();
    const added = vi.spyOn(metrics, "addMetric");
    const dimension = vi.spyOn(metrics, "addDimension");
    const response = await handler(
      functionUrlEvent("POST", "/v1/limit", limit, {}, "127.0.0.1", localIam),
      lambdaContext(5_000),
    );
    expect(response.statusCode).toBe(200);
    expect(added.mock.calls.map(([name]) => name)).toEqual(["requests", "allowed"]);
    expect(dimension).toHaveBeenCalledWith("algorithm", "fixed-window");
    const documents = printed();
    expect(documents).toHaveLength(1);
    expect(documents[0]).toMatchObject({ requests: 1, allowed: 1, algorithm: "fixed-window" });
  });

  it("counts a refused caller in the metric named by its code, and the limit is never run", async () => {
    // the local principal's tenant may call /v1/limit alone
    const { handler } = handlerWith(false, new Tenancy([{ ...localTenant([]), operations: ["limit"] }]));
    const printed = emfDocuments();
    const ran = vi.spyOn(RedisLimitStore.prototype, "runLimit");
    const stranger = { ...localIam, userArn: "arn:aws:iam::999999999999:user/stranger" };
    const unknown = await handler(
      functionUrlEvent("POST", "/v1/limit", limit, {}, "127.0.0.1", stranger),
      lambdaContext(5_000),
    );
    expect(unknown.statusCode).toBe(403);
    expect(JSON.parse(unknown.body ?? "{}")).toMatchObject({ error: { code: "unknown_principal" } });
    // unsigned: no IAM context at all
    const unsigned = await handler(functionUrlEvent("POST", "/v1/limit", limit), lambdaContext(5_000));
    expect(unsigned.statusCode).toBe(403);
    const frequency = await handler(
      functionUrlEvent("POST", "/v1/frequency", '{"userId":1,"channel":"push"}', {}, "127.0.0.1", localIam),
      lambdaContext(5_000),
    );
    expect(frequency.statusCode).toBe(403);
    expect(JSON.parse(frequency.body ?? "{}")).toMatchObject({ error: { code: "operation_not_allowed" } });
    expect(ran).not.toHaveBeenCalled();
    expect(printed()).toEqual([
      expect.objectContaining({ requests: 1, unknownPrincipal: 1 }),
      expect.objectContaining({ requests: 1, unknownPrincipal: 1 }),
      expect.objectContaining({ requests: 1, operationNotAllowed: 1 }),
    ]);
  });

  it("adds no metric and prints nothing when POWERTOOLS_METRICS_DISABLED is set", async () => {
    const { metrics, handler } = handlerWith(true);
    const printed = emfDocuments();
    const added = vi.spyOn(metrics, "addMetric");
    for (let i = 0; i < 3; i++) {
      const response = await handler(
        functionUrlEvent("POST", "/v1/limit", limit, {}, "127.0.0.1", localIam),
        lambdaContext(5_000),
      );
      expect(response.statusCode).toBe(200);
    }
    expect(added).not.toHaveBeenCalled();
    expect(printed()).toEqual([]);
  });
});
