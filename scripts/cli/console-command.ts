// `tollgate console`: the operator's console in the browser (scripts/console/), served on 127.0.0.1 with
// the operator's own AWS credentials and the options the other commands take; prints the address (with the
// launch's token) and serves until Ctrl-C.
import type { Command } from "commander";
import { DEFAULT_POLICY_KEY } from "../../functions/core/capping/policy.ts";
import { DEFAULT_ARCHIVE_PREFIX } from "../../functions/core/shared/decision-archive.ts";
import { type ConsoleOptions, consoleContext } from "../console/console-context.ts";
import { startConsoleServer } from "../console/console-server.ts";
import { CONSOLE_PAGES } from "../console/page-registry.ts";
import { withAws } from "./aws-options.ts";
import { integerIn } from "./option-values.ts";
import { withRedis } from "./redis-options.ts";

export function addConsoleCommand(program: Command): void {
  withRedis(
    withAws(
      program
        .command("console")
        .description(
          "the operator's console in the browser, on 127.0.0.1 with your AWS credentials: policy and quota rules, live usage, campaign reports, why, the DLQ",
        )
        .option("--port <n>", "the port on 127.0.0.1 (default: a free one)", integerIn(1, 65_535))
        .option("--bucket <name>", "the config bucket")
        .option("--policy-key <key>", "the policy's object key", DEFAULT_POLICY_KEY)
        .option("--archive-bucket <name>", "the archive's bucket (the stack output ArchiveBucket; default: --bucket)")
        .option("--archive-prefix <prefix>", "the archive's prefix in the bucket", DEFAULT_ARCHIVE_PREFIX)
        .option("--days <n>", "read only the last N days of the archive (default: all)", integerIn(1, 3_660))
        .option("--queue-url <url>", "the campaign queue's DLQ")
        .option("--to <url>", "the campaign queue (where a redrive sends dead letters)"),
    ),
  ).action(async (options: ConsoleOptions & { port?: number }) => {
    const server = await startConsoleServer(consoleContext(options), CONSOLE_PAGES, {
      ...(options.port === undefined ? {} : { port: options.port }),
    });
    console.log(
      `tollgate console at ${server.url}\n(only this machine can reach it; the token is this launch's) Ctrl-C stops it.`,
    );
    await new Promise<void>((resolve) => {
      process.once("SIGINT", resolve);
      process.once("SIGTERM", resolve);
    });
    await server.stop();
  });
}
