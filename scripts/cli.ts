// The `tollgate` operator CLI: the program, its command groups (scripts/cli/*) and its exit codes: 0 done,
// 1 a file's content or a service refused (the message says why), 2 usage error (an unknown command or
// option, a malformed option value or argument), 3 `check` answered "denied". AWS commands use the usual AWS
// environment (credentials, AWS_REGION), or `--endpoint` for an emulator, or `--local` for the stack of
// `npm run local` (.local/endpoints.json). The operator actions themselves are in functions/app.
//
//   npm run tollgate -- segments build --out build/segments new=new.txt active=active.txt
//   npm run tollgate -- segments upload --local build/segments/*.roaring
//   npm run tollgate -- policy validate config/policy.json
//   npm run tollgate -- policy upload --local config/policy.json
//   npm run tollgate -- campaign push --local --campaign spring --channel push --range 0-999999
//   npm run tollgate -- delivery tail --local --max 20
//   npm run tollgate -- dlq list --local
//   npm run tollgate -- why --local --user 17 --campaign spring
//   npm run tollgate -- campaign report --local spring
//   npm run tollgate -- console --local
//   npm run tollgate -- check --local /v1/limit '{"key":"login:1.2.3.4","algorithm":"gcra","burst":4,"count":1,"periodMs":1000}'
import { readFileSync } from "node:fs";
import { Command, CommanderError } from "commander";
import { InvalidPolicyError, ValidationError } from "../functions/core/shared/errors.ts";
import { addArchiveCommands } from "./cli/archive-commands.ts";
import { addCampaignCommands } from "./cli/campaign-commands.ts";
import { addCheckCommand, CheckFailed } from "./cli/check-command.ts";
import { addConsoleCommand } from "./cli/console-command.ts";
import { addDeliveryCommands } from "./cli/delivery-commands.ts";
import { addDlqCommands } from "./cli/dlq-commands.ts";
import { UsageError } from "./cli/option-values.ts";
import { addPolicyCommands } from "./cli/policy-commands.ts";
import { addQuotasCommands } from "./cli/quotas-commands.ts";
import { addRedisCommands } from "./cli/redis-commands.ts";
import { addSegmentsCommands } from "./cli/segments-commands.ts";
import { addStoreCommands } from "./cli/store-commands.ts";
import { addWhatIfCommand } from "./cli/what-if-command.ts";
import { isMain } from "./is-main.ts";

const { version } = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
  version: string;
};

export function makeProgram(): Command {
  const program = new Command("tollgate")
    .description(
      "Operate Tollgate: segments, policies, campaigns, the delivery queue, the DLQ, quota rules, the Redis libraries, the console",
    )
    .version(version)
    .exitOverride()
    .configureOutput({ writeErr: (text) => process.stderr.write(text) });
  addSegmentsCommands(program);
  addPolicyCommands(program);
  addCampaignCommands(program);
  addWhatIfCommand(program);
  addArchiveCommands(program);
  addDeliveryCommands(program);
  addDlqCommands(program);
  addCheckCommand(program);
  addQuotasCommands(program);
  addRedisCommands(program);
  addStoreCommands(program);
  addConsoleCommand(program);
  return program;
}

/** Runs the CLI; returns the exit code instead of exiting, so tests can call it. */
export async function runCli(argv: readonly string[]): Promise<number> {
  try {
    await makeProgram().parseAsync(argv, { from: "user" });
    return 0;
  } catch (error) {
    if (error instanceof CommanderError) return error.exitCode === 0 ? 0 : 2;
    if (error instanceof CheckFailed) return error.exitCode;
    if (error instanceof UsageError) {
      console.error(`tollgate: ${error.message}`);
      return 2;
    }
    if (error instanceof InvalidPolicyError) {
      console.error(`tollgate: invalid policy:\n${error.issues.map((issue) => `  ${issue}`).join("\n")}`);
      return 1;
    }
    if (error instanceof ValidationError) {
      console.error(`tollgate: ${error.message}`);
      return 1;
    }
    if ((error as NodeJS.ErrnoException).code === "ENOENT") {
      console.error(`tollgate: ${(error as Error).message}`);
      return 1;
    }
    // a service refused (missing bucket or queue, no credentials, no network): say so, exit 1
    const { name, message } = error as Error;
    console.error(`tollgate: ${name}: ${message}`);
    return 1;
  }
}

if (isMain(import.meta)) {
  runCli(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
