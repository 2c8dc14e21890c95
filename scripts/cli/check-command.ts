// `tollgate check`: one request to the check API (signed with SigV4 for a Lambda Function URL); the exit
// code says allowed (0), denied or capped (3), or an error reply (1).
import { defaultProvider } from "@aws-sdk/credential-provider-node";
import { type Command, Option } from "commander";
import { ValidationError } from "../../functions/core/shared/errors.ts";
import { ENDPOINTS_FILE } from "../local/endpoints.ts";
import { LOCAL_CREDENTIAL, LOCAL_REGION } from "../local/local-principals.ts";
import { functionUrlRegion, type SignedRequest, signRequest } from "../sign-request.ts";
import { localEndpoints, required } from "./aws-options.ts";

/** A check that ran but did not allow: its exit code, without a message. */
export class CheckFailed extends Error {
  constructor(readonly exitCode: number) {
    super(`exit ${exitCode}`);
  }
}

export function addCheckCommand(program: Command): void {
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
        // the local stack's URLs (on loopback) have AWS_IAM auth too: signed by its own key (local-principals.ts)
        const loopback = ["127.0.0.1", "localhost", "[::1]"].includes(new URL(request.url).hostname);
        const region = functionUrlRegion(request.url) ?? options.region;
        if (loopback && !options.sign) {
          request = await signRequest(request, { region: LOCAL_REGION, credentials: LOCAL_CREDENTIAL });
        } else if (options.sign || functionUrlRegion(request.url)) {
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
}
