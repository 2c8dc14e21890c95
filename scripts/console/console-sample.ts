// A local stack with something for every console page: a policy with segments, caps and a quota rule, two
// campaigns decided and archived (the second capped for the "new" segment), a key's quota usage reported by
// a client's sync, and a campaign message the consumer dead-lettered. The screenshots script and the
// console's browser tests start from it.
import { SendMessageCommand } from "@aws-sdk/client-sqs";
import { createAwsClients } from "../../functions/adapters/aws-clients.ts";
import { pushCampaign, uploadRules } from "../../functions/app/operator-actions.ts";
import { LOCAL_SIGNING, withLocalTenant } from "../local/local-principals.ts";
import type { LocalStack } from "../local-stack.ts";
import { signRequest } from "../sign-request.ts";

export const SAMPLE_POLICY = {
  version: "console.1",
  channels: ["email", "push"],
  segments: [{ name: "new", bitmap: "segments/new.roaring", caps: { push: [{ window: "1d", max: 1 }] } }],
  default: { name: "unsegmented", caps: { "*": [{ window: "7d", max: 3 }], email: [{ window: "1d", max: 2 }] } },
  quotas: [{ name: "api-calls", mode: "approximate", limits: [{ window: "60s", max: 500 }] }],
};
export const SAMPLE_USERS = Array.from({ length: 100 }, (_, i) => i);
/** Users 0-39 are "new": capped by push:1d in the second campaign. */
export const SAMPLE_NEW_USERS = SAMPLE_USERS.slice(0, 40);
export const SAMPLE_CAMPAIGNS = ["spring-sale", "flash-sale"] as const;
/** The key whose usage a client reported, and how much. */
export const SAMPLE_QUOTA = { rule: "api-calls", key: "customer-42", used: 120 };
/** A campaign batch on a channel the policy does not have: the consumer dead-letters it with the reason. */
export const SAMPLE_DEAD_LETTER = JSON.stringify({ campaignId: "summer-teaser", channel: "fax", userIds: [7, 8, 9] });

export async function seedConsoleSample(
  stack: LocalStack,
  options: { beforeCampaign?: (index: number) => void } = {},
): Promise<void> {
  const { endpoints } = stack;
  const { s3 } = createAwsClients({ region: endpoints.region, endpoint: endpoints.awsEndpoint });
  await uploadRules(s3, endpoints.bucket, withLocalTenant(SAMPLE_POLICY), { new: SAMPLE_NEW_USERS });
  stack.poller.start();
  for (const [i, campaignId] of SAMPLE_CAMPAIGNS.entries()) {
    options.beforeCampaign?.(i);
    await pushCampaign(stack.sqs, endpoints.campaignQueueUrl, {
      campaignId,
      channel: "push",
      userIds: SAMPLE_USERS,
      usersPerMessage: 25,
    });
    await stack.poller.drained();
  }
  await stack.sqs.send(
    new SendMessageCommand({ QueueUrl: endpoints.campaignQueueUrl, MessageBody: SAMPLE_DEAD_LETTER }),
  );
  await stack.poller.drained();
  await stack.poller.stop();
  await reportUsage(endpoints.functionUrl, SAMPLE_QUOTA);
}

/** One client's sync reporting `used` for the key, as the SDK's HTTP transport sends it. */
async function reportUsage(functionUrl: string, { rule, key, used }: typeof SAMPLE_QUOTA): Promise<void> {
  const url = `${functionUrl}/v1/quotas/sync`;
  const body = JSON.stringify({
    instanceId: "console-sample",
    rule,
    group: 0,
    seq: 1,
    configVersion: "",
    entries: [{ key, usage: [[Date.now(), used]], refunds: [], offered: used, want: 0 }],
  });
  const signed = await signRequest(
    { url, method: "POST", headers: { "content-type": "application/json" }, body },
    LOCAL_SIGNING,
  );
  const response = await fetch(url, { method: "POST", headers: signed.headers, body });
  if (!response.ok) throw new Error(`quota sync for the sample answered ${response.status}: ${await response.text()}`);
}
