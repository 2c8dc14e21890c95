// `tollgate quotas list|set|remove|usage`: the policy's Quotas mode rules, read from and written to the
// bucket (compare-and-set on the one policy object); `set`, `remove` and `usage` also reach Redis when given
// its nodes (--local: the local stack's).
import type { Command } from "commander";
import {
  type PolicyWritten,
  publishQuotaRules,
  quotaTenantNamespace,
  quotaUsage,
  readPolicy,
  removeQuotaRule,
  setQuotaRule,
} from "../../functions/app/quota-actions.ts";
import type { Policy } from "../../functions/core/capping/policy.ts";
import { ValidationError } from "../../functions/core/shared/errors.ts";
import { type AwsOptions, aws, required, withAws } from "./aws-options.ts";
import { optionProblemsText, quotaRuleFromOptions } from "./quota-rule-options.ts";
import { type RedisOptions, withCluster, withRedis } from "./redis-options.ts";

function describeRules(policy: Policy): string[] {
  return [...policy.quotas].map(
    ([name, { rule, version }]) =>
      `${name}\t${rule.mode}\t${rule.limits.map((l) => `${l.max}/${l.windowMs / 1000}s`).join(" ")}\t` +
      `lease ${rule.leaseMs} ms\tfallback ${rule.fallback}\tslot groups ${rule.slotGroups}\tversion ${version}`,
  );
}

/** After an edit of the policy: its rules (and removals) written to Redis when given its nodes. */
async function followedByRedis(
  { policy, modifiedAt }: PolicyWritten,
  options: RedisOptions,
  localNodes: string[] | undefined,
): Promise<void> {
  console.log(`uploaded policy ${policy.version}`);
  const nodes = options.redis ?? localNodes;
  if (nodes) {
    await withCluster(nodes, options, (cluster) => publishQuotaRules(cluster, options.namespace, policy, modifiedAt));
    console.log("written to Redis: clients apply it with their next sync");
  } else {
    console.log("clients apply it once a check API container reloads the policy (REFRESH_SECONDS), then sync");
  }
}

export function addQuotasCommands(program: Command): void {
  const quotas = program.command("quotas").description("Quotas mode rules (the policy's quotas section)");

  withAws(
    quotas
      .command("list")
      .description("the quota rules of the policy in the bucket")
      .option("--bucket <name>", "the config bucket"),
  ).action(async (options: AwsOptions & { bucket?: string }) => {
    const { s3, local } = aws(options);
    const { policy } = await readPolicy(s3, required(options.bucket, local?.bucket, "--bucket"));
    const lines = describeRules(policy);
    console.log(lines.length > 0 ? lines.join("\n") : `policy ${policy.version} has no quota rules`);
  });

  withRedis(
    withAws(
      quotas
        .command("set")
        .description("add or replace a rule, upload the policy with a new version, and write it to Redis if given")
        .argument("<name>", "rule name")
        .requiredOption("--mode <mode>", "strict | approximate")
        .requiredOption("--limit <window=max...>", "e.g. --limit 1s=1000 --limit 5s=4000")
        .option("--lease-ms <ms>", "strict: token lease; approximate: allowance validity")
        .option("--fallback <what>", "deny | allow | share (approximate only); default: strict deny, approximate share")
        .option("--slot-groups <n>", "hash slots the rule's keys are spread over")
        .option("--tenant <name...>", "grant the rule to these tenants (their quota-sync)")
        .option("--bucket <name>", "the config bucket"),
    ),
  ).action(
    async (
      name: string,
      options: AwsOptions &
        RedisOptions & {
          bucket?: string;
          mode: string;
          limit: string[];
          leaseMs?: string;
          fallback?: string;
          slotGroups?: string;
          tenant?: string[];
        },
    ) => {
      const { s3, local } = aws(options);
      const { rule, problems } = quotaRuleFromOptions(name, options);
      if (problems.length > 0) throw new ValidationError("", optionProblemsText(problems));
      const written = await setQuotaRule(
        s3,
        required(options.bucket, local?.bucket, "--bucket"),
        rule,
        options.tenant ?? [],
      );
      await followedByRedis(written, options, local?.redis);
    },
  );

  withRedis(
    withAws(
      quotas
        .command("remove")
        .description("take a rule out of the policy (a new version), and out of Redis if given")
        .argument("<name>", "rule name")
        .option("--bucket <name>", "the config bucket"),
    ),
  ).action(async (name: string, options: AwsOptions & RedisOptions & { bucket?: string }) => {
    const { s3, local } = aws(options);
    const written = await removeQuotaRule(s3, required(options.bucket, local?.bucket, "--bucket"), name);
    await followedByRedis(written, options, local?.redis);
  });

  withRedis(
    withAws(
      quotas
        .command("usage")
        .description("what each window of a rule holds for a key now")
        .argument("<rule>", "rule name")
        .argument("<key>", "quota key")
        .option("--tenant <name>", "the tenant whose key (default: the only tenant syncing the rule)")
        .option("--bucket <name>", "the config bucket"),
    ),
  ).action(
    async (
      ruleName: string,
      key: string,
      options: AwsOptions & RedisOptions & { bucket?: string; tenant?: string },
    ) => {
      const { s3, local } = aws(options);
      const { policy } = await readPolicy(s3, required(options.bucket, local?.bucket, "--bucket"));
      const nodes = options.redis ?? local?.redis;
      if (!nodes) throw new ValidationError("--redis", "required (or --local)");
      const reply = await withCluster(nodes, options, (cluster) =>
        quotaUsage(
          cluster,
          quotaTenantNamespace(options.namespace, policy, ruleName, options.tenant),
          policy,
          ruleName,
          key,
        ),
      );
      const rule = policy.quotas.get(ruleName)!.rule;
      const [entry] = reply.entries;
      rule.limits.forEach((limit, i) => {
        console.log(
          `${ruleName} ${key}\t${limit.windowMs / 1000}s\tused or reserved ${entry?.used[i] ?? 0} of ${limit.max}`,
        );
      });
      console.log(`active instances ${reply.instances}`);
    },
  );
}
