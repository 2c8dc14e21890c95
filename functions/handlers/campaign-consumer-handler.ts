// The campaign consumer's SQS adapter: each record through CampaignConsumer, partial batch responses,
// one log line and the metrics per record, and a time budget so a timeout never returns the whole batch.
// Records are decided in waves, several at once with one clock reading, so their script calls are shared.
import { BatchProcessor, EventType, processPartialResponse } from "@aws-lambda-powertools/batch";
import type { Logger } from "@aws-lambda-powertools/logger";
import { injectLambdaContext } from "@aws-lambda-powertools/logger/middleware";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import { logMetrics } from "@aws-lambda-powertools/metrics/middleware";
import middy from "@middy/core";
import type { Context, SQSBatchResponse, SQSEvent, SQSRecord } from "aws-lambda";
import type { CampaignConsumer, ConsumeOutcome } from "../core/capping/campaign-consumer.ts";
import type { CapBatchResult } from "../core/capping/decisions.ts";
import { type Clock, systemClock } from "../core/shared/clock.ts";
import {
  RulesUnavailableError,
  StoreLostError,
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
  /**
   * Records decided at once (RECORDS_IN_FLIGHT): the event's records go in waves of this many, in event
   * order; a wave starts when the one before has settled, checks the time budget and reads the clock once,
   * and its records share that reading (so batches of one campaign share their script calls).
   */
  recordsInFlight: number;
  clock?: Clock;
  /**
   * The decision archive: written out at the end of each invocation, waiting at most the time left less
   * the margin (what is not written by then stays buffered for the next invocation).
   */
  archive?: { flush(withinMs: number): Promise<void> };
  /** Told of every completed record (the local stack's demo and bench read the decisions here). */
  onOutcome?: (outcome: ConsumeOutcome, record: SQSRecord) => void;
}

export function makeCampaignConsumerHandler(deps: CampaignConsumerHandlerDeps) {
  const { consumer, logger, metrics, timeBudgetMarginMs, maxReceiveCount, recordsInFlight } = deps;
  const clock = deps.clock ?? systemClock;

  const handler = async (event: SQSEvent, context: Context): Promise<SQSBatchResponse> => {
    let storeDown: StoreUnavailableError | undefined;
    const waves = new Waves(event.Records.length, recordsInFlight, () => ({
      now: clock.now(),
      remaining: context.getRemainingTimeInMillis(),
    }));
    const processRecord = async (record: SQSRecord, { now, remaining }: WaveStart): Promise<void> => {
      // Redis is down for this invocation: fail the rest at once instead of waiting out each deadline
      if (storeDown) throw storeDown;
      if (remaining < timeBudgetMarginMs) {
        metrics.addMetric("recordsDeferred", MetricUnit.Count, 1);
        throw new TimeBudgetError(
          `${remaining} ms left, record ${record.messageId} needs up to ${timeBudgetMarginMs} ms`,
        );
      }
      try {
        const outcome = await consumer.consume(record.body, record.messageId, now);
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
          ...heldReport(outcome.result, outcome.deferredMessages),
        });
        metrics.addMetric("recordsDecided", MetricUnit.Count, 1);
        for (const [segment, totals] of Object.entries(outcome.result.totals)) {
          // a single metric is flushed per addMetric and forgets added dimensions: use default ones
          const single = metrics.singleMetric();
          single.setDefaultDimensions({ channel: outcome.channel, segment });
          single.addMetric("allowed", MetricUnit.Count, totals.allowed);
          single.addMetric("capped", MetricUnit.Count, totals.capped);
          if (totals.displaced) single.addMetric("displaced", MetricUnit.Count, totals.displaced);
          // capped or displaced sends of a deferring campaign: deferred to their eligibleAt, or dropped past it
          const cappedDeferred = Object.values(totals.deferredBy ?? {}).reduce((sum, n) => sum + n, 0);
          const cappedDropped = Object.values(totals.droppedBy ?? {}).reduce((sum, n) => sum + n, 0);
          if (cappedDeferred > 0) single.addMetric("cappedDeferred", MetricUnit.Count, cappedDeferred);
          if (cappedDropped > 0) single.addMetric("cappedDropped", MetricUnit.Count, cappedDropped);
          single.addMetric("duplicate", MetricUnit.Count, totals.duplicate);
          single.addMetric("exempt", MetricUnit.Count, totals.exempt);
        }
        for (const [zone, held] of Object.entries(outcome.result.held?.zones ?? {})) {
          const single = metrics.singleMetric();
          single.setDefaultDimensions({ channel: outcome.channel, zone });
          single.addMetric("quietDropped", MetricUnit.Count, held.quiet);
          single.addMetric("sendsDeferred", MetricUnit.Count, held.deferred);
          single.addMetric("droppedAfterDeferral", MetricUnit.Count, held.dropped);
        }
        if (outcome.deferredMessages > 0)
          metrics.addMetric("deferredMessages", MetricUnit.Count, outcome.deferredMessages);
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
    const recordHandler = (record: SQSRecord): Promise<void> => waves.run((start) => settle(record, start));
    const settle = async (record: SQSRecord, start: WaveStart): Promise<void> => {
      try {
        await processRecord(record, start);
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
    // Every record is handed over at once; Waves lets a wave's records run together and holds the rest. A
    // processor per invocation: it keeps the invocation's failures in its fields, and invocations running at
    // once in one process (the local poller's) would clear and answer each other's (docs/decisions/0126)
    const processor = new BatchProcessor(EventType.SQS);
    const response = await processPartialResponse(event, recordHandler, processor, {
      context,
      processInParallel: true,
    });
    // never fails the batch: the archive counts what it could not write
    // waiting here is what bounds the buffer when the archive writes slower than the consumer decides
    await deps.archive?.flush(Math.max(0, context.getRemainingTimeInMillis() - timeBudgetMarginMs));
    return response;
  };

  return middy(handler).use(injectLambdaContext(logger)).use(logMetrics(metrics));
}

interface WaveStart {
  /** The clock reading the wave's records are decided by. */
  now: number;
  /** The invocation's remaining time when the wave started. */
  remaining: number;
}

/**
 * An event's records in waves of `size`: the records are placed in the order they are handed over (the
 * event's order), and wave k starts when every record of wave k - 1 has settled, with one `begin()` for all
 * of its records.
 */
class Waves {
  private readonly starts: Promise<WaveStart>[] = [];
  private readonly left: number[] = [];
  private readonly settled: (() => void)[] = [];
  private placed = 0;

  constructor(
    count: number,
    private readonly size: number,
    begin: () => WaveStart,
  ) {
    let previous: Promise<void> | undefined;
    for (let first = 0; first < count; first += size) {
      this.left.push(Math.min(size, count - first));
      // the first wave begins at once, when the invocation starts
      this.starts.push(previous ? previous.then(begin) : Promise.resolve(begin()));
      previous = new Promise((resolve) => this.settled.push(resolve));
    }
  }

  async run(work: (start: WaveStart) => Promise<void>): Promise<void> {
    const wave = Math.floor(this.placed++ / this.size);
    const start = this.starts[wave];
    if (start === undefined) throw new Error(`more records handed over than the event's ${this.placed - 1}`);
    try {
      await work(await start);
    } finally {
      const left = (this.left[wave] as number) - 1;
      this.left[wave] = left;
      if (left === 0) this.settled[wave]?.();
    }
  }
}

/** The metric a failed record counts in: the kind of fault, so an outage and a defect read apart. */
function failureMetric(error: unknown): string {
  if (error instanceof StoreUnavailableError) return "storeErrors";
  if (error instanceof StoreReplyError) return "storeReplyErrors";
  if (error instanceof RulesUnavailableError) return "rulesUnavailable";
  if (error instanceof StoreLostError) return "storeLost";
  return "recordFailures";
}

/**
 * What quiet hours held back, for the batch's log line: by zone, and the deferred sends as a histogram of
 * their eligibleAt (ISO instant → users); nothing when none was held.
 */
function heldReport(result: CapBatchResult, deferredMessages: number): Record<string, unknown> {
  const held = result.held;
  if (!held) return {};
  const eligibleAt = Object.fromEntries(
    held.deferred.map(({ eligibleAt, userIds }) => [new Date(eligibleAt).toISOString(), userIds.length]),
  );
  return { held: { zones: held.zones, eligibleAt, deferredMessages } };
}
