// The campaign consumer's SQS adapter: each record through CampaignConsumer, partial batch responses,
// one log line and the metrics per record, and a time budget so a timeout never returns the whole batch.
import { BatchProcessor, EventType, processPartialResponse } from "@aws-lambda-powertools/batch";
import type { Logger } from "@aws-lambda-powertools/logger";
import { injectLambdaContext } from "@aws-lambda-powertools/logger/middleware";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import { logMetrics } from "@aws-lambda-powertools/metrics/middleware";
import middy from "@middy/core";
import type { Context, SQSBatchResponse, SQSEvent, SQSRecord } from "aws-lambda";
import type { CampaignConsumer, ConsumeOutcome } from "../core/capping/campaign-consumer.ts";
import {
  RulesUnavailableError,
  StoreReplyError,
  StoreUnavailableError,
  TimeBudgetError,
} from "../core/shared/errors.ts";

export interface CampaignConsumerHandlerDeps {
  consumer: CampaignConsumer;
  logger: Logger;
  metrics: Metrics;
  /** A record is started only with at least this much time left (its worst case: Redis and SQS deadlines). */
  timeBudgetMarginMs: number;
  /**
   * The campaign queue's maxReceiveCount: a record that fails on this receive would be redriven to the DLQ
   * by SQS with no reason, so it is dead-lettered here with its fault instead.
   */
  maxReceiveCount: number;
  /** Told of every completed record (the local stack's demo and bench read the decisions here). */
  onOutcome?: (outcome: ConsumeOutcome, record: SQSRecord) => void;
}

export function makeCampaignConsumerHandler(deps: CampaignConsumerHandlerDeps) {
  const { consumer, logger, metrics, timeBudgetMarginMs, maxReceiveCount } = deps;
  const processor = new BatchProcessor(EventType.SQS);

  const handler = async (event: SQSEvent, context: Context): Promise<SQSBatchResponse> => {
    let storeDown: StoreUnavailableError | undefined;
    const processRecord = async (record: SQSRecord): Promise<void> => {
      // Redis is down for this invocation: fail the rest at once instead of waiting out each deadline
      if (storeDown) throw storeDown;
      const remaining = context.getRemainingTimeInMillis();
      if (remaining < timeBudgetMarginMs) {
        metrics.addMetric("recordsDeferred", MetricUnit.Count, 1);
        throw new TimeBudgetError(
          `${remaining} ms left, record ${record.messageId} needs up to ${timeBudgetMarginMs} ms`,
        );
      }
      try {
        const outcome = await consumer.consume(record.body, record.messageId);
        deps.onOutcome?.(outcome, record);
        if (outcome.kind === "dead-lettered") {
          logger.warn("campaign batch dead-lettered", { messageId: record.messageId, reason: outcome.reason });
          metrics.addMetric("poisonMessages", MetricUnit.Count, 1);
          return;
        }
        logger.info("campaign batch decided", {
          messageId: record.messageId,
          campaignId: outcome.campaignId,
          channel: outcome.channel,
          policyVersion: outcome.result.policyVersion,
          deliveryMessages: outcome.deliveryMessages,
          timings: outcome.timings,
          totals: outcome.result.totals,
        });
        metrics.addMetric("recordsDecided", MetricUnit.Count, 1);
        for (const [segment, totals] of Object.entries(outcome.result.totals)) {
          // a single metric is flushed per addMetric and forgets added dimensions: use default ones
          const single = metrics.singleMetric();
          single.setDefaultDimensions({ channel: outcome.channel, segment });
          single.addMetric("allowed", MetricUnit.Count, totals.allowed);
          single.addMetric("capped", MetricUnit.Count, totals.capped);
          single.addMetric("duplicate", MetricUnit.Count, totals.duplicate);
          single.addMetric("exempt", MetricUnit.Count, totals.exempt);
        }
      } catch (error) {
        // Every fault here is the system's, not the message's: the record is retried (and dead-lettered
        // with its reason on its last receive, below). Only "Redis did not answer" stops the rest of the
        // invocation; an error reply is a defect of this one call and its siblings still run.
        if (error instanceof StoreUnavailableError) storeDown = error;
        logger.error("campaign batch failed", {
          messageId: record.messageId,
          receiveCount: record.attributes.ApproximateReceiveCount,
          error: error as Error,
          ...(error instanceof StoreReplyError ? { reply: error.reply } : {}),
        });
        metrics.addMetric(failureMetric(error), MetricUnit.Count, 1);
        throw error;
      }
    };
    const recordHandler = async (record: SQSRecord): Promise<void> => {
      try {
        await processRecord(record);
      } catch (error) {
        // SQS would redrive a record failing on its last receive to the DLQ as it is, with no reason: it is
        // dead-lettered here with its fault instead (if that send fails too, SQS's redrive still applies)
        if (Number(record.attributes.ApproximateReceiveCount) < maxReceiveCount) throw error;
        const reason = await consumer.deadLetterFault(record.body, record.messageId, error);
        logger.error("campaign batch failed on its last receive; dead-lettered", {
          messageId: record.messageId,
          reason,
        });
        metrics.addMetric("faultsDeadLettered", MetricUnit.Count, 1);
      }
    };
    // One record at a time, so the time budget is checked before each; each record is itself parallel
    // (every slot group of the batch in flight, delivery sends in parallel).
    return processPartialResponse(event, recordHandler, processor, { context, processInParallel: false });
  };

  return middy(handler).use(injectLambdaContext(logger)).use(logMetrics(metrics));
}

/** The metric a failed record counts in: the kind of fault, so an outage and a defect read apart. */
function failureMetric(error: unknown): string {
  if (error instanceof StoreUnavailableError) return "storeErrors";
  if (error instanceof StoreReplyError) return "storeReplyErrors";
  if (error instanceof RulesUnavailableError) return "rulesUnavailable";
  return "recordFailures";
}
