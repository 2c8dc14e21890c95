// One campaign-batch message, start to finish: parse, decide, forward the approved sends. A message that
// can never succeed goes to the dead-letter queue with its reason; a fault (Redis, the delivery queue)
// is thrown so the message is retried, and on its last receive goes to the DLQ with the fault as reason.
// Whatever was counted is forwarded, even when the rest of the message failed (docs/decisions/0125).
// No Lambda types here: the handler adapts SQS records to this.

import type { DecisionLog } from "../shared/decision-archive.ts";
import { PartlyDecidedError, ValidationError } from "../shared/errors.ts";
import { campaignDecisionLines } from "./archive-lines.ts";
import type { CampaignBatch } from "./campaign-batch.ts";
import type { Capper } from "./capper.ts";
import type { CapBatchResult } from "./decisions.ts";
import { type DeferralScheduler, deferralMessages } from "./deferral.ts";
import { type DeliveryMessage, type DeliverySink, deliveryMessages, refuseUndeliverable } from "./delivery.ts";

/** Why a message was dead-lettered: `error` is the error's class (ValidationError for the message's own fault). */
export interface DeadLetterReason {
  message: string;
  path: string;
  sourceMessageId: string;
  error: string;
}

/** Where messages that can never succeed go, with why. */
export interface DeadLetterSink {
  send(body: string, reason: DeadLetterReason): Promise<void>;
}

export type ConsumeOutcome =
  | {
      kind: "forwarded";
      campaignId: string;
      channel: string;
      result: CapBatchResult;
      deliveryMessages: number;
      /** Deferred messages handed to the scheduler (one per eligible instant and chunk of users). */
      deferredMessages: number;
      /** Wall time deciding (segments + Redis), forwarding (delivery queue) and archiving (the line built), ms. */
      timings: { decideMs: number; forwardMs: number; archiveMs: number };
    }
  | { kind: "dead-lettered"; reason: string };

export interface CampaignConsumerOptions {
  capper: Capper;
  delivery: DeliverySink;
  deadLetters: DeadLetterSink;
  /** Sends per delivery message (DELIVERY_BATCH_SIZE). */
  sendsPerMessage: number;
  /** The decision archive: every decision of a forwarded batch, one line a batch (none when absent). */
  archive?: DecisionLog;
  /** Where deferred sends wait for their eligibleAt (a batch that defers fails without one: it is retried). */
  deferrals?: DeferralScheduler;
}

export class CampaignConsumer {
  constructor(private readonly options: CampaignConsumerOptions) {}

  /**
   * Decides one message and forwards its allowed sends. `now`: the clock reading to decide by, shared by the
   * records an invocation decides together so that their script calls are shared (Capper.capBatch).
   */
  async consume(body: string, messageId: string, now?: number): Promise<ConsumeOutcome> {
    let document: unknown;
    try {
      document = JSON.parse(body);
    } catch (error) {
      return this.deadLetter(
        body,
        messageId,
        new ValidationError("body", `not valid JSON: ${(error as Error).message}`),
      );
    }
    let result: CapBatchResult;
    const started = performance.now();
    try {
      // capBatch validates the whole message (schema, channel, `at`) before it touches Redis; a batch
      // holding a send that could never be delivered is refused before anything is counted
      result = await this.options.capper.capBatch(document as CampaignBatch, {
        beforeCount: (batch, sends) => refuseUndeliverable(batch, sends, this.options.delivery.maxBodyBytes(batch)),
        now,
      });
    } catch (error) {
      if (error instanceof ValidationError) return this.deadLetter(body, messageId, error);
      // the calls that answered counted their allowed sends: forwarded now, so a send counted is a send
      // forwarded even if this message never succeeds (dead-lettered on its last receive, or paused by a
      // store loss until then); the retry finds them duplicate and forwards them again under the same ids
      if (error instanceof PartlyDecidedError) {
        await this.forward(document as CampaignBatch, (error as PartlyDecidedError<CapBatchResult>).decided);
        throw error.cause;
      }
      throw error;
    }
    const decided = performance.now();
    const batch = document as CampaignBatch;
    const messages = await this.forward(batch, result);
    // deferred after the delivery: a retry re-defers the same sends under the same names, never counted
    const decidedAt = now ?? result.at;
    const deferrals = deferralMessages(batch, result);
    if (deferrals.length > 0) {
      if (!this.options.deferrals) throw new Error("sends were deferred and no deferral scheduler is configured");
      await this.options.deferrals.schedule(deferrals, decidedAt);
    }
    // archived once forwarded: a batch retried after a failed send is archived by the attempt that took effect
    const forwarded = performance.now();
    const { archive } = this.options;
    if (archive) campaignDecisionLines(batch, result, now ?? result.at, (line, records) => archive.add(line, records));
    const timings = {
      decideMs: decided - started,
      forwardMs: forwarded - decided,
      archiveMs: performance.now() - forwarded,
    };
    return {
      kind: "forwarded",
      campaignId: batch.campaignId,
      channel: batch.channel,
      result,
      deliveryMessages: messages.length,
      deferredMessages: deferrals.length,
      timings,
    };
  }

  /** Sends the forwarded decisions of `result` (allowed, duplicate, exempt) to the delivery queue. */
  private async forward(batch: CampaignBatch, result: CapBatchResult): Promise<DeliveryMessage[]> {
    const messages = deliveryMessages(batch, result.decisions, {
      sendsPerMessage: this.options.sendsPerMessage,
      maxBodyBytes: this.options.delivery.maxBodyBytes(batch),
    });
    await this.options.delivery.send(messages);
    return messages;
  }

  /**
   * A message that failed on its last receive (the queue would redrive it next, with no reason): sent to the
   * DLQ here with the fault as its reason (a StoreReplyError's message carries Redis' reply).
   */
  async deadLetterFault(body: string, sourceMessageId: string, fault: unknown): Promise<string> {
    const error = fault instanceof Error ? fault : new Error(String(fault));
    const message = `retries exhausted: ${error.message}`;
    await this.options.deadLetters.send(body, {
      message,
      path: "",
      sourceMessageId,
      error: error.name,
    });
    return message;
  }

  private async deadLetter(body: string, sourceMessageId: string, error: ValidationError): Promise<ConsumeOutcome> {
    await this.options.deadLetters.send(body, {
      message: error.message,
      path: error.path,
      sourceMessageId,
      error: error.name,
    });
    return { kind: "dead-lettered", reason: error.message };
  }
}
