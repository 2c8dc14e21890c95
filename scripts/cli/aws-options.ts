// What the CLI's AWS commands share: --local (the stack of `npm run local`), --endpoint and --region, the
// clients they give, and options that --local can fill in.
import { existsSync, readFileSync } from "node:fs";
import { type Command, Option } from "commander";
import { createAwsClients } from "../../functions/adapters/aws-clients.ts";
import { ValidationError } from "../../functions/core/shared/errors.ts";
import { ENDPOINTS_FILE, type Endpoints } from "../local/endpoints.ts";
import { isRunning, readStackRecord, STACK_RECORD_FILE } from "../local/stack-record.ts";

export interface AwsOptions {
  local?: boolean;
  endpoint?: string;
  region?: string;
}

/** --local, --endpoint and --region, shared by every command that talks to AWS. */
export function withAws(command: Command): Command {
  return command
    .option("--local", `use the stack of \`npm run local\` (${ENDPOINTS_FILE})`)
    .addOption(new Option("--endpoint <url>", "S3/SQS endpoint (an emulator)").env("AWS_ENDPOINT_URL"))
    .addOption(new Option("--region <region>", "AWS region").env("AWS_REGION").default("us-east-1"));
}

/** The endpoints of a running `npm run local`; a missing file or a stack whose process is gone is refused. */
export function localEndpoints(): Endpoints {
  if (!existsSync(ENDPOINTS_FILE))
    throw new ValidationError("--local", `${ENDPOINTS_FILE} not found: is \`npm run local\` running?`);
  // a stack killed without its cleanup leaves its endpoints behind: say so rather than fail to connect
  const record = readStackRecord();
  if (!record)
    throw new ValidationError(
      "--local",
      `${ENDPOINTS_FILE} has no ${STACK_RECORD_FILE}: is \`npm run local\` running?`,
    );
  if (!isRunning(record.pid))
    throw new ValidationError(
      "--local",
      `the local stack that wrote ${ENDPOINTS_FILE} (pid ${record.pid}) is not running: is \`npm run local\` running?`,
    );
  return JSON.parse(readFileSync(ENDPOINTS_FILE, "utf8")) as Endpoints;
}

export function aws(options: AwsOptions) {
  const local = options.local ? localEndpoints() : undefined;
  if (local) {
    process.env.AWS_ACCESS_KEY_ID ??= "local";
    process.env.AWS_SECRET_ACCESS_KEY ??= "local";
  }
  const endpoint = local?.awsEndpoint ?? options.endpoint;
  const clients = createAwsClients({
    region: local?.region ?? options.region ?? "us-east-1",
    ...(endpoint ? { endpoint } : {}),
  });
  return { ...clients, local };
}

/** A value from the option, or from the local stack's endpoints, or a usage error naming the option. */
export function required(value: string | undefined, fallback: string | undefined, option: string): string {
  const chosen = value ?? fallback;
  if (!chosen) throw new ValidationError(option, "required (or --local)");
  return chosen;
}
