// The check API's code in a process of its own behind a local Function URL, so a nemesis can kill and restart
// it: the QuotaSync function of the Quotas scenarios (CHECK_API_ROUTES=quota-sync, the default here) or the
// whole check API of the check API scenarios (CHECK_API_ROUTES=all), as scripts/local-stack.ts and
// infra/functions.ts run them, two execution environments each. The environment (REDIS_NODES, CONFIG_BUCKET,
// AWS_ENDPOINT_URL, ...) comes from the harness; the port is the first argument. It says `listening <url>` on
// IPC once it serves.
import { wireCheckApi } from "../../functions/app/wiring.ts";
import { startFunctionUrlServer } from "../local/function-url-server.ts";
import { LOCAL_CREDENTIAL } from "../local/local-principals.ts";

async function main(): Promise<void> {
  const port = Number(process.argv[2] ?? 0);
  const env = { CHECK_API_ROUTES: "quota-sync", ...process.env };
  const environments = Array.from({ length: 2 }, () => wireCheckApi(env));
  await Promise.all(environments.map((environment) => environment.warm()));
  const server = await startFunctionUrlServer(
    environments.map(({ handler }) => handler),
    port,
    env.CHECK_API_ROUTES === "quota-sync" ? "tollgate-quota-sync" : "tollgate-check-api",
    // AWS_IAM auth as deployed: the instances and clients sign as the local principal, whose tenant may do all
    { credentials: [LOCAL_CREDENTIAL] },
  );
  // the deployed schedule (every minute): rules the store lost are restored for the direct clients too
  setInterval(() => {
    environments[0]?.restoreQuotaRules().catch(() => {});
  }, 60_000);
  process.send?.({ type: "listening", url: server.url });
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
