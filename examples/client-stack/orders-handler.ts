// The example client's Lambda, outside Tollgate's VPC: an API whose requests are rate-limited by Quotas,
// synced over the QuotaSync Function URL (SigV4). In a project of your own, import "@tollgate/quotas",
// "@tollgate/quotas/http" and "@tollgate/quotas/middy"; this repository runs the sources, by path.
import { defaultProvider } from "@aws-sdk/credential-provider-node";
import middy from "@middy/core";
import type { APIGatewayProxyEventV2 } from "aws-lambda";
import { createQuotas } from "../../sdk/src/index.ts";
import { middyQuotas } from "../../sdk/src/middleware/middy.ts";
import { httpTransport } from "../../sdk/src/transports/http.ts";

const url = process.env.QUOTA_SYNC_URL;
const region = process.env.AWS_REGION;
if (!url || !region) throw new Error("QUOTA_SYNC_URL and AWS_REGION are required");

// no start(): on Lambda the middleware syncs at the invocation boundary, never from a timer
const quotas = createQuotas({ transport: httpTransport({ url, signing: { region, credentials: defaultProvider() } }) });

export const handler = middy<APIGatewayProxyEventV2, unknown>()
  .use(
    middyQuotas<APIGatewayProxyEventV2>(quotas, {
      rule: "orders",
      key: (event) => event.headers["x-api-key"] ?? "anonymous",
    }),
  )
  .handler(async () => ({ statusCode: 200, body: JSON.stringify({ ok: true }) }));
