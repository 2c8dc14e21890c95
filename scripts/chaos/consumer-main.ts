// One campaign consumer of a chaos run, a process of its own so a nemesis can kill -9 it mid-batch: the
// consumer's wiring (functions/app/wiring.ts, as the Lambda entry builds it) driven by the local stack's SQS
// poller, as Lambda's event source mapping drives it. The environment (REDIS_NODES, CONFIG_BUCKET, the queue
// URLs, AWS_ENDPOINT_URL, ...) comes from the harness; CHAOS_CAMPAIGN_QUEUE_URL and _ARN name the queue it
// polls. It tells the harness over IPC of each capped decision (the delivery queue shows only what went out),
// when each record's sends were decided, and each hash slot its store epoch finds lost (what the StoreLost
// metric counts). With CHAOS_CLOCK_OFFSET_MS it decides by the harness's clock (the system's plus that offset),
// and tells of every send it held or deferred (the quiet-hours family).
import { wireCampaignConsumer } from "../../functions/app/wiring.ts";
import { SqsPoller } from "../local/sqs-poller.ts";

export interface ConsumerMessage {
  type: "ready" | "capped" | "decided" | "store-lost" | "held";
  capped?: {
    seq: number;
    userId: number;
    cap: { channel: string; windowMs: number; max: number };
    decidedAt: number;
  }[];
  /**
   * "decided": the record, the users it allowed and those the store already held as sent (`duplicate`: counted
   * by an earlier attempt), when the consumer had decided them (its clock, ms: the true one unless CHAOS_CLOCK_OFFSET_MS moves it).
   */
  decided?: { seq: number; allowed: number[]; duplicate: number[]; decidedAt: number };
  /** "held": sends decided `quiet`, `deferred` or `dropped` (`byCap`: by a cap, not quiet hours), when (harness clock). */
  held?: {
    seq: number;
    userId: number;
    decision: "quiet" | "deferred" | "dropped";
    byCap: boolean;
    decidedAt: number;
  }[];
  /** "store-lost": the slots lost since the process started, and when it first found one. */
  storeLost?: { slotsLostSinceStart: number; firstLossAt: string | undefined };
}

function seqOf(body: string): number {
  const seq = (JSON.parse(body) as { payload?: { seq?: unknown } }).payload?.seq;
  return typeof seq === "number" ? seq : -1;
}

async function main(): Promise<void> {
  const offsetMs = Number(process.env.CHAOS_CLOCK_OFFSET_MS ?? 0);
  const clock = { now: () => Date.now() + offsetMs };
  const wired = wireCampaignConsumer(process.env, {
    clock,
    onOutcome: (outcome, record) => {
      if (outcome.kind !== "forwarded") return;
      const seq = seqOf(record.body);
      const decidedAt = clock.now();
      const capped = outcome.result.decisions.flatMap((d) =>
        d.decision === "capped" && d.cap
          ? [
              {
                seq,
                userId: d.userId,
                cap: { channel: d.cap.channel, windowMs: d.cap.windowMs, max: d.cap.max },
                decidedAt,
              },
            ]
          : [],
      );
      if (capped.length > 0) process.send?.({ type: "capped", capped } satisfies ConsumerMessage);
      const held = outcome.result.decisions.flatMap((d) =>
        d.decision === "quiet" || d.decision === "deferred" || d.decision === "dropped"
          ? [{ seq, userId: d.userId, decision: d.decision, byCap: d.cap !== undefined, decidedAt }]
          : [],
      );
      if (held.length > 0) process.send?.({ type: "held", held } satisfies ConsumerMessage);
      const users = (kind: string) => outcome.result.decisions.filter((d) => d.decision === kind).map((d) => d.userId);
      const decided = { seq, allowed: users("allowed"), duplicate: users("duplicate"), decidedAt };
      process.send?.({ type: "decided", decided } satisfies ConsumerMessage);
    },
  });
  const poller = new SqsPoller({
    sqs: wired.sqs,
    queueUrl: process.env.CHAOS_CAMPAIGN_QUEUE_URL as string,
    queueArn: process.env.CHAOS_CAMPAIGN_QUEUE_ARN as string,
    region: wired.config.AWS_REGION,
    handler: wired.handler,
    batchSize: 5,
    concurrency: 2,
    functionTimeoutMs: 60_000,
  });
  poller.start();
  process.send?.({ type: "ready" } satisfies ConsumerMessage);
  // the StoreLost count as the operator's alarm sees it: told when it grows
  let told = 0;
  const watch = setInterval(() => {
    const status = wired.epoch.status();
    if (status.slotsLostSinceStart <= told) return;
    told = status.slotsLostSinceStart;
    const storeLost = { slotsLostSinceStart: told, firstLossAt: status.firstLossAt };
    process.send?.({ type: "store-lost", storeLost } satisfies ConsumerMessage);
  }, 100);
  process.on("message", async (message: { type?: string }) => {
    if (message.type !== "stop") return;
    clearInterval(watch);
    await poller.stop();
    wired.cluster.disconnect();
    process.exit(0);
  });
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
