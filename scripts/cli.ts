// The `tollgate` operator CLI. Exit codes: 0 done, 1 the input or a service refused (the message says
// why), 2 usage error. AWS commands use the usual AWS environment (credentials, AWS_REGION), or
// `--endpoint` for an emulator, or `--local` for the stack of `npm run local` (.local/endpoints.json).
//
//   npm run tollgate -- segments build --out build/segments new=new.txt active=active.txt
//   npm run tollgate -- segments upload --local build/segments/*.roaring
//   npm run tollgate -- policy validate config/policy.json
//   npm run tollgate -- policy upload --local config/policy.json
//   npm run tollgate -- campaign push --local --campaign spring --channel push --range 0-999999
//   npm run tollgate -- delivery tail --local --max 20
//   npm run tollgate -- check --local /v1/limit '{"key":"login:1.2.3.4","algorithm":"gcra","burst":4,"count":1,"periodMs":1000}'
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { defaultProvider } from "@aws-sdk/credential-provider-node";
import { SingleBar } from "cli-progress";
import { Command, CommanderError, Option } from "commander";
import { createAwsClients } from "../functions/adapters/aws-clients.ts";
import { campaignBatchSchema } from "../functions/core/capping/campaign-batch.ts";
import { DEFAULT_POLICY_KEY, parsePolicyText } from "../functions/core/capping/policy.ts";
import { buildSegments, parseUserIdList } from "../functions/core/capping/segment-builder.ts";
import { parseBitmap } from "../functions/core/capping/segment-index.ts";
import { InvalidPolicyError, ValidationError } from "../functions/core/shared/errors.ts";
import { MAX_USER_ID } from "../functions/core/shared/send-fields.ts";
import { parseOrThrow } from "../functions/core/shared/validation.ts";
import { isMain } from "./is-main.ts";
import { ENDPOINTS_FILE, type Endpoints } from "./local/endpoints.ts";
import { pushCampaign, readDelivery, uploadObject } from "./operations.ts";
import { functionUrlRegion, type SignedRequest, signRequest } from "./sign-request.ts";

interface AwsOptions {
  local?: boolean;
  endpoint?: string;
  region?: string;
}

/** --local, --endpoint and --region, shared by every command that talks to AWS. */
function withAws(command: Command): Command {
  return command
    .option("--local", `use the stack of \`npm run local\` (${ENDPOINTS_FILE})`)
    .addOption(new Option("--endpoint <url>", "S3/SQS endpoint (an emulator)").env("AWS_ENDPOINT_URL"))
    .addOption(new Option("--region <region>", "AWS region").env("AWS_REGION").default("us-east-1"));
}

function localEndpoints(): Endpoints {
  if (!existsSync(ENDPOINTS_FILE))
    throw new ValidationError("--local", `${ENDPOINTS_FILE} not found: is \`npm run local\` running?`);
  return JSON.parse(readFileSync(ENDPOINTS_FILE, "utf8")) as Endpoints;
}

function aws(options: AwsOptions) {
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
function required(value: string | undefined, fallback: string | undefined, option: string): string {
  const chosen = value ?? fallback;
  if (!chosen) throw new ValidationError(option, "required (or --local)");
  return chosen;
}

/** User IDs from `--range A-B` or `--ids-file F`. */
function userIdsOf(options: { range?: string; idsFile?: string }): number[] {
  if (options.range !== undefined) {
    const match = /^([0-9]+)-([0-9]+)$/.exec(options.range);
    const [from, to] = [Number(match?.[1]), Number(match?.[2])];
    if (!match || from > to || to > MAX_USER_ID)
      throw new ValidationError("--range", `expected FROM-TO with 0 <= FROM <= TO <= ${MAX_USER_ID}`);
    return Array.from({ length: to - from + 1 }, (_, i) => from + i);
  }
  if (options.idsFile !== undefined) return parseUserIdList(readFileSync(options.idsFile, "utf8"), options.idsFile);
  throw new ValidationError("--range", "give --range FROM-TO or --ids-file FILE");
}

export function makeProgram(): Command {
  const program = new Command("tollgate")
    .description("Operate Tollgate: segments, policies, campaigns, the delivery queue")
    .exitOverride()
    .configureOutput({ writeErr: (text) => process.stderr.write(text) });

  const segments = program.command("segments").description("segment bitmaps (CRoaring portable format)");
  segments
    .command("build")
    .description("build one bitmap per segment from files of user IDs (one per line, or comma/space separated)")
    .requiredOption("--out <dir>", "directory for <name>.roaring files")
    .argument("<segment=file...>", "segment name and the file of its user IDs")
    .action((pairs: string[], options: { out: string }) => {
      const members = pairs.map((pair) => {
        const [name, file] = pair.split("=", 2);
        if (!name || !file) throw new ValidationError(pair, "expected <segment>=<file>");
        return { name, userIds: parseUserIdList(readFileSync(file, "utf8"), file) };
      });
      const built = buildSegments(members);
      mkdirSync(options.out, { recursive: true });
      for (const { name, userIds } of members) {
        const path = join(options.out, `${name}.roaring`);
        const bytes = built.get(name) as Uint8Array;
        writeFileSync(path, bytes);
        console.log(`${path}: ${new Set(userIds).size} users, ${bytes.length} bytes`);
      }
    });

  withAws(
    segments
      .command("upload")
      .description("check and upload bitmaps to s3://BUCKET/segments/<file name>")
      .option("--bucket <name>", "the config bucket")
      .argument("<file...>", "portable roaring bitmap files"),
  ).action(async (files: string[], options: AwsOptions & { bucket?: string }) => {
    const { s3, local } = aws(options);
    const bucket = required(options.bucket, local?.bucket, "--bucket");
    // every file is checked before the first upload: a bad one uploads nothing
    const bodies = files.map((file) => {
      const bytes = readFileSync(file);
      parseBitmap(bytes, file);
      return { key: `segments/${basename(file)}`, bytes };
    });
    for (const { key, bytes } of bodies) {
      await uploadObject(s3, bucket, key, bytes);
      console.log(`uploaded s3://${bucket}/${key} (${bytes.length} bytes)`);
    }
  });

  const policy = program.command("policy").description("the capping policy (config/policy.json)");
  policy
    .command("validate")
    .description("check a policy file; prints every problem by field")
    .argument("<file>", "policy JSON file")
    .action((file: string) => {
      const parsed = parsePolicyText(readFileSync(file, "utf8"));
      console.log(
        `${file}: valid (version ${parsed.version}; channels ${parsed.channels.join(", ")}; ` +
          `segments ${parsed.segments.map((s) => s.name).join(", ")})`,
      );
    });

  withAws(
    policy
      .command("upload")
      .description("validate, then upload to s3://BUCKET/config/policy.json; an invalid policy is not uploaded")
      .option("--bucket <name>", "the config bucket")
      .option("--key <key>", "object key", DEFAULT_POLICY_KEY)
      .argument("<file>", "policy JSON file"),
  ).action(async (file: string, options: AwsOptions & { bucket?: string; key: string }) => {
    const text = readFileSync(file, "utf8");
    const parsed = parsePolicyText(text);
    const { s3, local } = aws(options);
    const bucket = required(options.bucket, local?.bucket, "--bucket");
    await uploadObject(s3, bucket, options.key, text);
    console.log(
      `uploaded policy ${parsed.version} to s3://${bucket}/${options.key}; containers pick it up within REFRESH_SECONDS`,
    );
  });

  withAws(
    program
      .command("campaign")
      .description("campaigns")
      .command("push")
      .description("put a campaign on the campaign queue as batch messages")
      .option("--queue-url <url>", "the campaign queue")
      .requiredOption("--campaign <id>", "campaign ID")
      .requiredOption("--channel <name>", "channel")
      .option("--range <from-to>", "user IDs FROM..TO")
      .option("--ids-file <file>", "file of user IDs")
      .option("--payload <json>", "payload forwarded with every send")
      .option("--at <ms>", "send time, ms since the epoch (default: when processed)")
      .option("--exempt", "skip the caps (transactional)")
      .option("--count-exempt", "with --exempt: count the sends anyway")
      .option("--per-message <n>", "user IDs per message", "10000"),
  ).action(
    async (
      options: AwsOptions & {
        queueUrl?: string;
        campaign: string;
        channel: string;
        range?: string;
        idsFile?: string;
        payload?: string;
        at?: string;
        exempt?: boolean;
        countExempt?: boolean;
        perMessage: string;
      },
    ) => {
      const userIds = userIdsOf(options);
      let payload: unknown;
      if (options.payload !== undefined) {
        try {
          payload = JSON.parse(options.payload);
        } catch {
          throw new ValidationError("--payload", "not valid JSON");
        }
      }
      const batch = parseOrThrow(campaignBatchSchema, {
        campaignId: options.campaign,
        channel: options.channel,
        userIds: [],
        ...(payload === undefined ? {} : { payload }),
        ...(options.at === undefined ? {} : { at: Number(options.at) }),
        ...(options.exempt ? { exempt: true } : {}),
        ...(options.countExempt ? { countExempt: true } : {}),
      });
      const perMessage = Number(options.perMessage);
      if (!Number.isInteger(perMessage) || perMessage < 1 || perMessage > 50_000) {
        throw new ValidationError("--per-message", "expected an integer from 1 to 50000");
      }
      const { sqs, local } = aws(options);
      const queueUrl = required(options.queueUrl, local?.campaignQueueUrl, "--queue-url");
      const bar = process.stderr.isTTY ? new SingleBar({ format: "pushing [{bar}] {value}/{total} users" }) : undefined;
      bar?.start(userIds.length, 0);
      const messages = await pushCampaign(sqs, queueUrl, {
        ...batch,
        userIds,
        usersPerMessage: perMessage,
        onProgress: (sent) => bar?.update(sent),
      });
      bar?.stop();
      console.log(`pushed campaign ${batch.campaignId}: ${userIds.length} users in ${messages} messages`);
    },
  );

  withAws(
    program
      .command("delivery")
      .description("the delivery queue")
      .command("tail")
      .description("print delivery messages as JSON lines")
      .option("--queue-url <url>", "the delivery queue")
      .option("--max <n>", "stop after this many messages", "100")
      .option("--remove", "delete what was read (default: leave it for the real consumer)"),
  ).action(async (options: AwsOptions & { queueUrl?: string; max: string; remove?: boolean }) => {
    const { sqs, local } = aws(options);
    const queueUrl = required(options.queueUrl, local?.deliveryQueueUrl, "--queue-url");
    let sends = 0;
    const count = await readDelivery(sqs, queueUrl, {
      max: Number(options.max),
      remove: options.remove === true,
      onMessage: (message) => {
        // print whatever arrives, even a message that is not a delivery message
        sends += Array.isArray(message.sends) ? message.sends.length : 0;
        console.log(JSON.stringify(message));
      },
    });
    console.error(`${count} delivery messages, ${sends} sends`);
  });

  program
    .command("check")
    .description("ask the check API: exit 0 allowed, 3 denied or capped, 1 on an error reply")
    .argument("<path>", "/v1/limit, /v1/limits, /v1/frequency or /v1/health")
    .argument("[json]", "request body (POST)")
    .option("--local", `use the local Function URL (${ENDPOINTS_FILE})`)
    .option("--url <url>", "the Function URL")
    .option("--sign", "sign with SigV4 (default: when the URL is a Lambda Function URL)")
    .addOption(new Option("--region <region>", "signing region (default: from the URL)").env("AWS_REGION"))
    .action(
      async (
        path: string,
        json: string | undefined,
        options: { local?: boolean; url?: string; sign?: boolean; region?: string },
      ) => {
        const base = required(options.url, options.local ? localEndpoints().functionUrl : undefined, "--url");
        if (json !== undefined) {
          try {
            JSON.parse(json);
          } catch {
            throw new ValidationError("json", "not valid JSON");
          }
        }
        let request: SignedRequest = {
          url: new URL(path, base).toString(),
          method: json === undefined ? "GET" : "POST",
          headers: json === undefined ? {} : { "content-type": "application/json" },
          body: json ?? "",
        };
        const region = functionUrlRegion(request.url) ?? options.region;
        if (options.sign || functionUrlRegion(request.url)) {
          if (!region) throw new ValidationError("--region", "required to sign a request to this URL");
          request = await signRequest(request, { region, credentials: defaultProvider() });
        }
        const response = await fetch(request.url, {
          method: request.method,
          headers: request.headers,
          ...(request.body ? { body: request.body } : {}),
        });
        const text = await response.text();
        console.log(text);
        if (!response.ok) {
          console.error(`tollgate: ${response.status} ${response.statusText}`);
          throw new CheckFailed(1);
        }
        const reply = JSON.parse(text) as { allowed?: boolean };
        if (reply.allowed === false) throw new CheckFailed(3);
      },
    );

  return program;
}

/** A check that ran but did not allow: its exit code, without a message. */
class CheckFailed extends Error {
  constructor(readonly exitCode: number) {
    super(`exit ${exitCode}`);
  }
}

/** Runs the CLI; returns the exit code instead of exiting, so tests can call it. */
export async function runCli(argv: readonly string[]): Promise<number> {
  try {
    await makeProgram().parseAsync(argv, { from: "user" });
    return 0;
  } catch (error) {
    if (error instanceof CommanderError) return error.exitCode === 0 ? 0 : 2;
    if (error instanceof CheckFailed) return error.exitCode;
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
