// The QuotaSync function of a chaos run, a process of its own so a nemesis can kill and restart it: the
// check API's code with CHECK_API_ROUTES=quota-sync behind a local Function URL, as scripts/local-stack.ts
// and infra/functions.ts run it. The environment (REDIS_NODES, CONFIG_BUCKET, AWS_ENDPOINT_URL, ...) comes
// from the harness; the port is the first argument. It says `listening <url>` on IPC once it serves.
import { wireCheckApi } from "../../functions/app/wiring.ts";
import { startFunctionUrlServer } from "../local/function-url-server.ts";
import { LOCAL_CREDENTIAL } from "../local/local-principals.ts";

async function main(): Promise<void> {
  const port = Number(process.argv[2] ?? 0);
  const environments = Array.from({ length: 2 }, () =>
    wireCheckApi({ ...process.env, CHECK_API_ROUTES: "quota-sync" }),
  );
  await Promise.all(environments.map((environment) => environment.warm()));
  const server = await startFunctionUrlServer(
    environments.map(({ handler }) => handler),
    port,
    "tollgate-quota-sync",
    // AWS_IAM auth as deployed: the instances sign as the local principal, whose tenant syncs the rules
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
