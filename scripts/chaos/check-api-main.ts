// The check API's code in a process of its own behind a local Function URL, so a nemesis can kill and restart
// it: the QuotaSync function of the Quotas scenarios (CHECK_API_ROUTES=quota-sync, the default here) or the
// whole check API of the check API scenarios (CHECK_API_ROUTES=all), as scripts/local-stack.ts and
// infra/functions.ts run them, two execution environments each. The environment (REDIS_NODES, CONFIG_BUCKET,
// AWS_ENDPOINT_URL, ...) comes from the harness; the port is the first argument. It says `listening <url>` on
// IPC once it serves.
import { wireCheckApi } from "../../functions/app/wiring.ts";
import { startFunctionUrlServer } from "../local/function-url-server.ts";
import { LOCAL_CREDENTIAL } from "../local/local-principals.ts";
import { CHAOS_TENANTS } from "./tenants.ts";

async function main(): Promise<void> {
  const port = Number(process.argv[2] ?? 0);
  const env = { CHECK_API_ROUTES: "quota-sync", ...process.env };
  const environments = Array.from({ length: 2 }, () => wireCheckApi(env));
  await Promise.all(environments.map((environment) => environment.warm()));
  const server = await startFunctionUrlServer(
    environments.map(({ handler }) => handler),
    port,
    env.CHECK_API_ROUTES === "quota-sync" ? "tollgate-quota-sync" : "tollgate-check-api",
    // AWS_IAM auth as deployed: the instances and clients sign as the local principal (whose tenant may do
    // all), or as tenant A's or B's
    { credentials: [LOCAL_CREDENTIAL, ...CHAOS_TENANTS.map((tenant) => tenant.credential)] },
  );
  // the deployed schedule (every minute): rules the store lost are restored for the direct clients too
  setInterval(() => {
    environments[0]?.restoreQuotaRules().catch(() => {});
  }, 60_000);
  // the harness asks for the scheduled restore at once (a data-loss scenario lasts seconds, not a minute)
  process.on("message", (message: { type?: string }) => {
    if (message.type !== "restore") return;
    environments[0]?.restoreQuotaRules().then(
      ({ restored }) => process.send?.({ type: "restored", restored }),
      (error: Error) => process.send?.({ type: "restored", error: error.message }),
    );
  });
  process.send?.({ type: "listening", url: server.url });
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
