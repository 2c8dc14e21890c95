// The check API's log lines carry the invocation's Lambda context, every invocation, whether or not log
// sampling is on (without it, the context is added without Powertools' per-invocation sampling draw).
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import middy from "@middy/core";
import type { APIGatewayProxyEventV2 } from "aws-lambda";
import { afterEach, describe, expect, it, vi } from "vitest";
import { Limiter } from "../../../functions/core/limits/limiter.ts";
import { lambdaContextOf, makeCheckApiHandler } from "../../../functions/handlers/check-api-handler.ts";
import { checkApiContext as context } from "../../support/check-api-invocation.ts";
import { localIam, localTenancy } from "../../support/tenants.ts";

const event = (body: string) =>
  ({
    rawPath: "/v1/limit",
    body,
    isBase64Encoded: false,
    headers: {},
    requestContext: { http: { method: "POST" }, authorizer: { iam: localIam } },
  }) as unknown as APIGatewayProxyEventV2;

/**
 * The attributes of each log line `logger` prints while `run` runs (Powertools' printLog, which formats
 * them into the JSON line; whether that goes to stdout or stderr does not matter here).
 */
async function logLines(logger: Logger, run: () => Promise<unknown>): Promise<Record<string, unknown>[]> {
  const lines: Record<string, unknown>[] = [];
  type Printer = { printLog(level: number, item: { getAttributes(): Record<string, unknown> }): void };
  vi.spyOn(logger as unknown as Printer, "printLog").mockImplementation((_level, item) => {
    lines.push(item.getAttributes());
  });
  await run();
  return lines;
}

afterEach(() => vi.restoreAllMocks());

describe("check API logs", () => {
  it("every log line of an invocation names that invocation's request, without log sampling", async () => {
    // a store whose call fails as a bug would (a TypeError): the handler answers 500 and logs it
    const limiter = new Limiter({
      store: {
        runLimit: () => Promise.reject(new TypeError("a defect")),
        runLimits: () => Promise.reject(new TypeError("a defect")),
      },
    });
    // the suite runs with POWERTOOLS_LOG_LEVEL=SILENT
    const logger = new Logger({ serviceName: "tollgate-check-api", logLevel: "INFO" });
    const handler = makeCheckApiHandler({
      tenancy: async () => localTenancy(),
      limiter,
      frequency: () => Promise.reject(new Error("not used")),
      health: () => Promise.reject(new Error("not used")),
      logger,
      metrics: new Metrics({ namespace: "Tollgate", serviceName: "check-api" }),
    });
    const body = JSON.stringify({ key: "k", algorithm: "fixed-window", max: 1, windowMs: 1000 });
    for (const id of ["request-1", "request-2"]) {
      const lines = await logLines(logger, async () => {
        const response = await handler(event(body), context(id));
        expect(response.statusCode).toBe(500);
      });
      expect(lines.map((line) => [line.message, line.function_request_id])).toEqual([["check failed", id]]);
      expect(lines[0]).toMatchObject({ function_name: "tollgate-check-api" });
    }
  });

  it("with a sample rate, debug lines are sampled per invocation (Powertools' own middleware)", async () => {
    const logger = new Logger({ serviceName: "sampled", logLevel: "WARN", sampleRateValue: 1 });
    const handler = middy(async () => {
      logger.debug("sampled line");
      return {};
    }).use(lambdaContextOf(logger));
    for (const id of ["request-1", "request-2"]) {
      const lines = await logLines(logger, () => handler({} as never, context(id)));
      expect(lines.map((line) => [line.message, line.function_request_id])).toContainEqual(["sampled line", id]);
    }
  });
});
