// Where deferred sends wait for their eligibleAt (the DeferralScheduler port, core/capping/deferral.ts):
// the campaign queue itself with a message delay up to SQS's 15 minutes, EventBridge Scheduler one-time
// schedules beyond (deleted once they fired, their failures to the schedules' DLQ), and the router that
// picks one by the delay. The local stack's own scheduler (objects in the S3 emulator) is local-schedules.ts.
import { ConflictException, CreateScheduleCommand, type SchedulerClient } from "@aws-sdk/client-scheduler";
import { SendMessageBatchCommand, type SendMessageBatchRequestEntry, type SQSClient } from "@aws-sdk/client-sqs";
import { type Deferral, type DeferralScheduler, SQS_MAX_DELAY_MS } from "../core/capping/deferral.ts";
import { chunkEntries } from "./sqs-sinks.ts";

/**
 * Deferrals due within SQS_MAX_DELAY_MS of `now`: sent to the campaign queue with that delay (whole seconds,
 * rounded up). A retried batch sends its deferrals again: the campaign queue is a standard queue, which has no
 * deduplication, and a FIFO queue (which has) takes no per-message delay. The copies are the same sends under
 * the same campaign, so the dedupe ids deliver and count each send once when they are re-decided.
 */
export class SqsDelayDeferrals implements DeferralScheduler {
  constructor(
    private readonly sqs: SQSClient,
    private readonly campaignQueueUrl: string,
  ) {}

  async schedule(deferrals: readonly Deferral[], now: number): Promise<void> {
    const entries = deferrals.map(
      (deferral, i): SendMessageBatchRequestEntry => ({
        Id: String(i),
        MessageBody: deferral.body,
        DelaySeconds: Math.min(SQS_MAX_DELAY_MS / 1000, Math.max(0, Math.ceil((deferral.eligibleAt - now) / 1000))),
      }),
    );
    for (const chunk of chunkEntries(entries)) {
      const reply = await this.sqs.send(
        new SendMessageBatchCommand({ QueueUrl: this.campaignQueueUrl, Entries: chunk }),
      );
      const failed = reply.Failed ?? [];
      if (failed.length > 0) {
        throw new Error(
          `the campaign queue refused ${failed.length} deferred messages: ${failed[0]?.Code}: ${failed[0]?.Message}`,
        );
      }
    }
  }
}

export interface EventBridgeDeferralsOptions {
  /** The schedule group the stack created (its schedules, and only those, the consumer may create). */
  groupName: string;
  /** The campaign queue's ARN: the target every schedule sends its message to. */
  targetArn: string;
  /** The role the scheduler assumes to send to the campaign queue (the consumer may pass it, nothing else). */
  roleArn: string;
  /** Where a schedule's message goes when the scheduler could not deliver it. */
  deadLetterArn: string;
}

/**
 * Deferrals due later: one one-time schedule each, `at()` the eligible second (rounded up, UTC), deleted
 * after it fires. The schedule's name is the deferral's: a retried batch re-creates the same name, which
 * the scheduler refuses (ConflictException) and counts as done, so a send is never scheduled twice.
 */
export class EventBridgeDeferrals implements DeferralScheduler {
  constructor(
    private readonly scheduler: SchedulerClient,
    private readonly options: EventBridgeDeferralsOptions,
  ) {}

  async schedule(deferrals: readonly Deferral[]): Promise<void> {
    const { groupName, targetArn, roleArn, deadLetterArn } = this.options;
    for (const deferral of deferrals) {
      try {
        await this.scheduler.send(
          new CreateScheduleCommand({
            Name: deferral.name,
            GroupName: groupName,
            ScheduleExpression: `at(${atExpression(deferral.eligibleAt)})`,
            ScheduleExpressionTimezone: "UTC",
            FlexibleTimeWindow: { Mode: "OFF" },
            ActionAfterCompletion: "DELETE",
            Target: {
              Arn: targetArn,
              RoleArn: roleArn,
              Input: deferral.body,
              DeadLetterConfig: { Arn: deadLetterArn },
              RetryPolicy: { MaximumEventAgeInSeconds: 86_400, MaximumRetryAttempts: 185 },
            },
          }),
        );
      } catch (error) {
        if (!(error instanceof ConflictException)) throw error;
      }
    }
  }
}

/** `yyyy-mm-ddThh:mm:ss` of the second at or after `instant` (what a one-time schedule's at() takes). */
export function atExpression(instant: number): string {
  return new Date(Math.ceil(instant / 1000) * 1000).toISOString().slice(0, 19);
}

/** Deferrals due within SQS's 15 minutes go to `near`, later ones to `far`. */
export class RoutedDeferrals implements DeferralScheduler {
  constructor(
    private readonly near: DeferralScheduler,
    private readonly far: DeferralScheduler,
  ) {}

  async schedule(deferrals: readonly Deferral[], now: number): Promise<void> {
    const soon = deferrals.filter((deferral) => deferral.eligibleAt - now <= SQS_MAX_DELAY_MS);
    const later = deferrals.filter((deferral) => deferral.eligibleAt - now > SQS_MAX_DELAY_MS);
    if (soon.length > 0) await this.near.schedule(soon, now);
    if (later.length > 0) await this.far.schedule(later, now);
  }
}
