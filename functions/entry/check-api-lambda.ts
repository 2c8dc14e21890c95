// Lambda entry of the check API (behind a Function URL): reads the environment (and the Redis secret) once,
// and opens the Redis connections during init, outside every request's budget. The QuotaSync function (the
// same code) is also invoked every minute by an EventBridge schedule: rules lost with the store's state are
// restored from the policy (infra/functions.ts).
import type { APIGatewayProxyEventV2, Context } from "aws-lambda";
import { withRedisSecret } from "../app/redis-secret.ts";
import { wireCheckApi } from "../app/wiring.ts";

const api = wireCheckApi(await withRedisSecret(process.env));
await api.warm();

/** EventBridge's scheduled event (`detail-type` "Scheduled Event"), not a Function URL request. */
const scheduled = (event: unknown): boolean =>
  typeof event === "object" &&
  event !== null &&
  (event as Record<string, unknown>)["detail-type"] === "Scheduled Event";

export const handler = (event: APIGatewayProxyEventV2, context: Context) =>
  scheduled(event) ? api.restoreQuotaRules() : api.handler(event, context);
