// The pipeline section: one campaign to every user through the local stack (fauxqs in this process, the
// consumer driven by the SQS poller, the bench cluster), with the SQS requests it made per 1,000 users.
import type { SQSClient } from "@aws-sdk/client-sqs";
import { createAwsClients } from "../../functions/adapters/aws-clients.ts";
import { pushCampaign, uploadRules } from "../../functions/app/operator-actions.ts";
import { policyDocument, SEGMENTS, segmentOfUser, USERS } from "./campaign.ts";
import { startBenchStack } from "./stack.ts";
import { n, today } from "./tables.ts";

/**
 * A campaign to every user through the local stack: pushed to the campaign queue (10,000 users a
 * message), decided by the handler that the SQS poller drives (batches of 10, 2 at once), and forwarded
 * to the delivery queue (DELIVERY_BATCH_SIZE 100). It is timed from the first push until the campaign
 * queue is drained.
 */
export async function runPipeline(engineRate: number | undefined): Promise<string[]> {
  const requests = new Map<string, number>();
  const count = (client: SQSClient, role: string) =>
    client.middlewareStack.add(
      (next, context) => async (args) => {
        // GetQueueAttributes is the bench's own polling for "drained", not part of the pipeline
        if (context.commandName !== "GetQueueAttributesCommand") {
          const key = `${role} ${context.commandName}`;
          requests.set(key, (requests.get(key) ?? 0) + 1);
        }
        return next(args);
      },
      { step: "initialize", name: `benchCount${role}` },
    );
  let decideMs = 0;
  let forwardMs = 0;
  const stack = await startBenchStack({
    queuePrefix: "bench",
    namespace: "bench-pipeline",
    onOutcome: (outcome) => {
      if (outcome.kind !== "forwarded") return;
      decideMs += outcome.timings.decideMs;
      forwardMs += outcome.timings.forwardMs;
    },
  });
  try {
    const { endpoints } = stack;
    const { s3, sqs } = createAwsClients({ region: endpoints.region, endpoint: endpoints.awsEndpoint });
    const members: Record<string, number[]> = Object.fromEntries(SEGMENTS.map((name) => [name, []]));
    for (let id = 0; id < USERS; id++) members[SEGMENTS[segmentOfUser(id)] as string]?.push(id);
    await uploadRules(s3, endpoints.bucket, policyDocument(), members);
    count(sqs, "push");
    count(stack.sqs, "event-source");
    count(stack.consumer.sqs, "handler");
    const userIds = Array.from({ length: USERS }, (_, i) => i);
    const started = performance.now();
    await pushCampaign(sqs, endpoints.campaignQueueUrl, { campaignId: "bench-e2e", channel: "push", userIds });
    await stack.poller.drained(600_000);
    const seconds = (performance.now() - started) / 1000;
    const { handlerMs, invocations, failedRecords } = stack.poller.stats;
    const per1000 = (prefix: string) =>
      ([...requests].filter(([key]) => key.startsWith(prefix)).reduce((sum, [, n]) => sum + n, 0) * 1000) / USERS;
    const list = (prefix: string) =>
      [...requests]
        .filter(([key]) => key.startsWith(prefix))
        .map(([key, n]) => `${key.split(" ")[1]} ${n}`)
        .join(", ");
    // a batch's records run at once: their times are shares of their own sum, not of the handler's time
    const share = (ms: number) => `${((100 * ms) / (decideMs + forwardMs)).toFixed(0)}%`;
    const rate = USERS / seconds;
    console.log(`pipeline: ${Math.round(rate)} users/s, ${invocations} invocations, ${failedRecords} failed records`);
    return [
      `Measured ${today()} by \`npm run bench\` (BENCH_USERS=${USERS}): one campaign to every user, ` +
        "pushed as 10,000-user messages, handler batches of 10 with 2 invocations at once, DELIVERY_BATCH_SIZE 100, fauxqs in the same Node process.",
      "",
      "| Figure | Value |",
      "|---|---|",
      `| End-to-end users/s (first push → campaign queue drained, sends on the delivery queue) | ${n(rate)} |`,
      engineRate === undefined
        ? "| Engine alone, same run | (run without BENCH_ONLY to compare) |"
        : `| Engine alone, same run (capping table, campaign 1) | ${n(engineRate)} decisions/s: the pipeline runs at ${((100 * rate) / engineRate).toFixed(0)}% of it |`,
      `| Record time deciding (segments + Redis), of the records' summed time | ${share(decideMs)} |`,
      `| Record time forwarding (delivery messages built, SendMessageBatch to the delivery queue) | ${share(forwardMs)} |`,
      `| Records' summed time / handler time (a batch's records run at once) | ${((decideMs + forwardMs) / handlerMs).toFixed(1)}× |`,
      `| Handler invocations / failed records | ${invocations} / ${failedRecords} |`,
      `| SQS requests per 1,000 users: campaign push | ${per1000("push").toFixed(2)} (${list("push")}) |`,
      `| SQS requests per 1,000 users: event source (receive, delete) | ${per1000("event-source").toFixed(2)} (${list("event-source")}) |`,
      `| SQS requests per 1,000 users: handler (delivery, DLQ) | ${per1000("handler").toFixed(2)} (${list("handler")}) |`,
    ];
  } finally {
    await stack.stop();
  }
}
