// The policy page: the policy in service and its quota rules, edited as `tollgate policy upload` and
// `tollgate quotas set|remove` edit them (the same actions, the same validation), each save made with
// compare-and-set against what the editor opened: a save after another editor's is refused, never lost.
import { z } from "zod";
import { S3ObjectStore } from "../../../functions/adapters/s3-object-store.ts";
import { uploadPolicy } from "../../../functions/app/operator-actions.ts";
import {
  type PolicyWritten,
  publishQuotaRules,
  readPolicy,
  removeQuotaRule,
  setQuotaRule,
} from "../../../functions/app/quota-actions.ts";
import { quotaRuleOpened } from "../../../functions/core/capping/policy-edits.ts";
import { InvalidPolicyError, ObjectNotFoundError, ValidationError } from "../../../functions/core/shared/errors.ts";
import { quotaRuleFromOptions } from "../../cli/quota-rule-options.ts";
import { withCluster } from "../../cli/redis-options.ts";
import type { ConsoleContext } from "../console-context.ts";
import { type ConsolePage, route } from "../console-page.ts";

/** The CLI's option names as the form's fields. */
const FORM_FIELDS: Record<string, string> = {
  "--limit": "limits",
  "--lease-ms": "leaseMs",
  "--slot-groups": "slotGroups",
  "--tenant": "tenants",
  rule: "name",
};

async function current(context: ConsoleContext) {
  try {
    return await readPolicy(context.s3, context.bucket, context.policyKey);
  } catch (error) {
    if (error instanceof ObjectNotFoundError) return undefined;
    // a policy that does not validate is still shown, to be mended
    if (error instanceof InvalidPolicyError) return { text: await rawText(context), policy: undefined };
    throw error;
  }
}

async function rawText(context: ConsoleContext): Promise<string> {
  return new TextDecoder().decode(await new S3ObjectStore(context.s3, context.bucket).get(context.policyKey));
}

/** The rule form's problems named by its fields: "quotas[2].leaseMs: ..." is the form's "leaseMs". */
function asFormProblems(error: unknown): unknown {
  const field = (path: string) => FORM_FIELDS[path] ?? path.replace(/^quotas\[\d+\]\./, "");
  if (error instanceof InvalidPolicyError)
    return new InvalidPolicyError(
      error.issues.map((issue) => {
        const at = issue.indexOf(": ");
        return at < 0 ? issue : `${field(issue.slice(0, at))}: ${issue.slice(at + 2)}`;
      }),
    );
  if (error instanceof ValidationError && !(error instanceof InvalidPolicyError) && error.path)
    return new ValidationError(field(error.path), error.message.slice(error.path.length + 2));
  return error;
}

/** After a rule's edit, as `quotas set` does with --redis: the rules written to Redis now when the console has its nodes. */
async function reachFleet(context: ConsoleContext, written: PolicyWritten) {
  const { nodes } = context.redis;
  if (!nodes) return "clients apply it once a check API container reloads the policy (REFRESH_SECONDS), then sync";
  await withCluster(nodes, context.redis, (cluster) =>
    publishQuotaRules(cluster, context.redis.namespace, written.policy, written.modifiedAt),
  );
  return "written to Redis: clients apply it with their next sync";
}

const optionalText = z.string().trim().optional();

export const policyPage: ConsolePage = {
  id: "policy",
  title: "Policy and quota rules",
  routes: [
    route({
      method: "GET",
      path: "",
      input: z.object({}),
      handle: async (context) => {
        const found = await current(context);
        if (!found) return { text: null, policy: null, rules: [], tenants: [] };
        const { text, policy } = found;
        return {
          text,
          policy: policy && {
            version: policy.version,
            channels: policy.channels,
            segments: policy.segments.map((segment, i) => ({
              name: segment.name,
              caps: policy.channels.map((channel) => ({
                channel,
                caps: policy.capsFor(i, channel).map((cap) => `${cap.channel}:${cap.window} max ${cap.max}`),
              })),
            })),
          },
          rules: policy
            ? [...policy.quotas].map(([name, { rule }]) => ({
                name,
                rule,
                tenants: policy.tenancy
                  .list()
                  .filter((t) => t.quotaRules.has(name))
                  .map((t) => t.name),
                opened: quotaRuleOpened(found, name) ?? null,
              }))
            : [],
          tenants: policy ? policy.tenancy.list().map((t) => t.name) : [],
        };
      },
    }),
    route({
      method: "POST",
      path: "",
      input: z.object({ text: z.string().min(1, "the policy is empty"), openedText: z.string().nullable() }),
      handle: async (context, { text, openedText }) => {
        // `policy upload --replace-quotas`: the editor holds the whole document, quota rules included
        const { policy } = await uploadPolicy(context.s3, context.bucket, text, {
          key: context.policyKey,
          replaceQuotas: true,
          opened: { text: openedText ?? undefined },
        });
        return {
          version: policy.version,
          note: "uploaded; containers pick it up within REFRESH_SECONDS",
        };
      },
    }),
    route({
      method: "POST",
      path: "rule",
      input: z.object({
        name: z.string().trim(),
        mode: z.string().trim(),
        limits: z.string(),
        leaseMs: optionalText,
        fallback: optionalText,
        slotGroups: optionalText,
        tenants: z.array(z.string()).default([]),
        openedRule: z.string().nullable(),
      }),
      handle: async (context, input) => {
        // the form's text as `quotas set` takes its options; empty fields are options not given
        const given = (text: string | undefined) => (text === undefined || text === "" ? undefined : text);
        const { rule, problems } = quotaRuleFromOptions(input.name, {
          mode: input.mode,
          limit: input.limits.split(/[\s,]+/).filter(Boolean),
          ...(given(input.leaseMs) === undefined ? {} : { leaseMs: input.leaseMs }),
          ...(given(input.fallback) === undefined ? {} : { fallback: input.fallback }),
          ...(given(input.slotGroups) === undefined ? {} : { slotGroups: input.slotGroups }),
        });
        if (problems.length > 0)
          throw new InvalidPolicyError(problems.map((p) => `${FORM_FIELDS[p.option] ?? p.option}: ${p.message}`));
        try {
          const written = await setQuotaRule(context.s3, context.bucket, rule, input.tenants, {
            rule: input.openedRule ?? undefined,
          });
          return { version: written.policy.version, note: await reachFleet(context, written) };
        } catch (error) {
          throw asFormProblems(error);
        }
      },
    }),
    route({
      method: "POST",
      path: "rule/remove",
      input: z.object({ name: z.string(), openedRule: z.string().nullable() }),
      handle: async (context, { name, openedRule }) => {
        const written = await removeQuotaRule(context.s3, context.bucket, name, { rule: openedRule ?? undefined });
        return { version: written.policy.version, note: await reachFleet(context, written) };
      },
    }),
  ],
};
