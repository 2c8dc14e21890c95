// `tollgate policy validate|upload`: the capping policy checked by the parser production uses, and
// uploaded only when valid.
import { readFileSync } from "node:fs";
import type { Command } from "commander";
import { uploadPolicy } from "../../functions/app/operator-actions.ts";
import { DEFAULT_POLICY_KEY, parsePolicyText } from "../../functions/core/capping/policy.ts";
import { type AwsOptions, aws, required, withAws } from "./aws-options.ts";

export function addPolicyCommands(program: Command): void {
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
      .description(
        "validate, then upload to s3://BUCKET/config/policy.json (compare-and-set); an invalid policy is not " +
          "uploaded; without a quotas section the bucket's quota rules are kept",
      )
      .option("--bucket <name>", "the config bucket")
      .option("--key <key>", "object key", DEFAULT_POLICY_KEY)
      .option("--replace-quotas", "let the file's quotas section replace the quota rules in the bucket")
      .argument("<file>", "policy JSON file"),
  ).action(async (file: string, options: AwsOptions & { bucket?: string; key: string; replaceQuotas?: boolean }) => {
    const text = readFileSync(file, "utf8");
    const { s3, local } = aws(options);
    const bucket = required(options.bucket, local?.bucket, "--bucket");
    const { policy: parsed } = await uploadPolicy(s3, bucket, text, {
      key: options.key,
      replaceQuotas: options.replaceQuotas === true,
    });
    console.log(
      `uploaded policy ${parsed.version} to s3://${bucket}/${options.key}; containers pick it up within REFRESH_SECONDS`,
    );
  });
}
