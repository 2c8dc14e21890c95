// One campaign-batch message, start to finish: parse, decide, forward the approved sends. A message that
// can never succeed goes to the dead-letter queue with its reason; a fault (Redis, the delivery queue)
// is thrown so the message is retried. No Lambda types here: the handler adapts SQS records to this.

import { ValidationError } from "../shared/errors.ts";
import type { CampaignBatch } from "./campaign-batch.ts";
import type { Capper } from "./capper.ts";
import type { CapBatchResult } from "./decisions.ts";
import { type DeliverySink, deliveryMessages } from "./delivery.ts";

/** Where messages that can never succeed go, with why. */
export interface DeadLetterSink {
  send(body: string, reason: { message: string; path: string; sourceMessageId: string }): Promise<void>;
}

export type ConsumeOutcome =
  | {
      kind: "forwarded";
      campaignId: string;
      channel: string;
      result: CapBatchResult;
      deliveryMessages: number;
      /** Wall time deciding (segments + Redis) and forwarding (delivery queue), ms. */
      timings: { decideMs: number; forwardMs: number };
    }
  | { kind: "dead-lettered"; reason: string };

export interface CampaignConsumerOptions {
  capper: Capper;
  delivery: DeliverySink;
  deadLetters: DeadLetterSink;
  /** Sends per delivery message (DELIVERY_BATCH_SIZE). */
  sendsPerMessage: number;
}

export class CampaignConsumer {
  constructor(private readonly options: CampaignConsumerOptions) {}

  async consume(body: string, messageId: string): Promise<ConsumeOutcome> {
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
      // capBatch validates the whole message (schema, channel, `at`) before it touches Redis
      result = await this.options.capper.capBatch(document as CampaignBatch);
    } catch (error) {
      if (error instanceof ValidationError) return this.deadLetter(body, messageId, error);
      throw error;
    }
    const decided = performance.now();
    const batch = document as CampaignBatch;
    const messages = deliveryMessages(batch, result.decisions, this.options.sendsPerMessage);
    await this.options.delivery.send(messages);
    const timings = { decideMs: decided - started, forwardMs: performance.now() - decided };
    return {
      kind: "forwarded",
      campaignId: batch.campaignId,
      channel: batch.channel,
      result,
      deliveryMessages: messages.length,
      timings,
    };
  }

  private async deadLetter(body: string, sourceMessageId: string, error: ValidationError): Promise<ConsumeOutcome> {
    await this.options.deadLetters.send(body, { message: error.message, path: error.path, sourceMessageId });
    return { kind: "dead-lettered", reason: error.message };
  }
}
