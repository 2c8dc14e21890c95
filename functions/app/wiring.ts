// Builds each function from its environment with real clients (Redis Cluster, S3, SQS). The Lambda
// entries and the local stack both use this, so they run the same code.
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import type { S3Client } from "@aws-sdk/client-s3";
import { SchedulerClient } from "@aws-sdk/client-scheduler";
import { tenantNamespace } from "../../sdk/src/protocol/index.ts";
import { createFirehoseClient, FirehoseArchiveWriter, S3ArchiveWriter } from "../adapters/archive-writers.ts";
import { createAwsClients } from "../adapters/aws-clients.ts";
import { EventBridgeDeferrals, RoutedDeferrals, SqsDelayDeferrals } from "../adapters/deferral-schedulers.ts";
import { emfCount } from "../adapters/emf.ts";
import { S3Schedules } from "../adapters/local-schedules.ts";
import {
  createRedisCluster,
  RedisCapStore,
  type RedisClusterConfig,
  RedisLimitStore,
  redisCallsOf,
} from "../adapters/redis-cluster.ts";
import { RedisQuotaStore } from "../adapters/redis-quota-store.ts";
import { RedisStoreEpochSlots } from "../adapters/redis-store-epoch.ts";
import { RedisTenantIndex } from "../adapters/redis-tenant-index.ts";
import { type WarmUpReport, warmUp } from "../adapters/redis-warm-up.ts";
import { S3ObjectStore } from "../adapters/s3-object-store.ts";
import { SqsDeadLetterSink, SqsDeliverySink } from "../adapters/sqs-sinks.ts";
import { CampaignConsumer } from "../core/capping/campaign-consumer.ts";
import { Capper } from "../core/capping/capper.ts";
import type { DeferralScheduler } from "../core/capping/deferral.ts";
import { type Rules, RulesSource } from "../core/capping/rules-source.ts";
import { Limiter } from "../core/limits/limiter.ts";
import { NegativeCache } from "../core/limits/negative-cache.ts";
import { QUOTA_STATE_LOST_METRIC, QuotaSyncService, rulesStamp } from "../core/quotas/quota-sync-service.ts";
import { publishTenantRules } from "../core/quotas/tenant-rules-publication.ts";
import { type Clock, systemClock } from "../core/shared/clock.ts";
import { DecisionArchive } from "../core/shared/decision-archive.ts";
import { DEFAULT_ON_STORE_LOSS, STORE_LOST_METRIC, StoreEpochGuard } from "../core/shared/store-epoch.ts";
import type { Tenant } from "../core/shared/tenants.ts";
import {
  type CampaignConsumerHandlerDeps,
  makeCampaignConsumerHandler,
} from "../handlers/campaign-consumer-handler.ts";
import { type HealthReport, makeCheckApiHandler } from "../handlers/check-api-handler.ts";
import { type CommonEnvironment, parseCheckApiEnvironment, parseConsumerEnvironment } from "./environment.ts";
import { redisSecretReader } from "./redis-secret.ts";

/** How long init waits for Redis and the rules; Lambda allows 10 s for the whole init phase. */
const WARM_UP_MS = 4_000;

/** What every function builds the same way: AWS clients, the Redis Cluster client, the rules source. */
function commonParts(
  config: CommonEnvironment,
  logger: Logger,
  metrics: Metrics,
  redis: Pick<RedisClusterConfig, "autoPipelining"> = {},
  onActivated?: (active: Rules) => void,
) {
  const { s3, sqs } = createAwsClients({
    region: config.AWS_REGION,
    ...(config.AWS_ENDPOINT_URL ? { endpoint: config.AWS_ENDPOINT_URL } : {}),
  });
  // the AUTH secret again when Redis refuses the password in use (a rotation)
  const readPassword = redisSecretReader(config);
  const cluster = createRedisCluster({
    nodes: config.REDIS_NODES,
    tls: config.REDIS_TLS,
    ...(config.REDIS_USERNAME ? { username: config.REDIS_USERNAME } : {}),
    ...(config.REDIS_PASSWORD ? { password: config.REDIS_PASSWORD } : {}),
    ...(readPassword ? { readPassword } : {}),
    ...redis,
  });
  const rules = new RulesSource({
    store: new S3ObjectStore(s3, config.CONFIG_BUCKET),
    policyKey: config.POLICY_KEY,
    refreshMs: config.REFRESH_SECONDS * 1000,
    maxShrink: config.SEGMENT_MAX_SHRINK_PERCENT / 100,
    keyNamespace: config.KEY_NAMESPACE,
    onRejected: (error) => {
      logger.error("new policy or segments refused; the last good ones stay in service", { error });
      const single = metrics.singleMetric();
      single.addMetric("rulesRejected", MetricUnit.Count, 1);
    },
    onActivated: (active, tags) => {
      logger.info("rules in service", { policyVersion: active.policy.version, tags });
      onActivated?.(active);
    },
    onCopyFailed: (error) =>
      logger.warn("the accepted bitmap's copy was not written; containers started later compare with the one before", {
        error,
      }),
  });
  return { s3, sqs, cluster, rules };
}

/**
 * The store epoch of caps and limits (docs/decisions/0091-store-epoch-per-hash-slot.md): the marker in the
 * rules bucket, the epoch keys in Redis, the policy's `onStoreLoss`; each slot found lost is logged as an
 * error carrying the EMF count `StoreLost` (counted whether or not per-request metrics are published).
 */
function storeEpoch(
  config: CommonEnvironment,
  { s3, cluster, rules }: Pick<ReturnType<typeof commonParts>, "s3" | "cluster" | "rules">,
  logger: Logger,
  clock: Clock,
): StoreEpochGuard {
  return new StoreEpochGuard({
    objects: new S3ObjectStore(s3, config.CONFIG_BUCKET),
    slots: new RedisStoreEpochSlots(cluster),
    namespace: config.KEY_NAMESPACE,
    clock,
    // without rules in service, the safe choice
    onStoreLoss: () =>
      rules.current().then(
        (active) => active.policy.onStoreLoss,
        () => DEFAULT_ON_STORE_LOSS,
      ),
    onLoss: (loss) =>
      logger.error(
        loss.onStoreLoss === "pause"
          ? "store lost the state of a hash slot: nothing counted there until `tollgate store acknowledge`"
          : "store lost the state of a hash slot: counting on against the empty state (onStoreLoss continue)",
        { ...loss, ...emfCount("Tollgate", STORE_LOST_METRIC, 1, clock.now()) },
      ),
  });
}

/**
 * The decision archive of DECISION_ARCHIVE (undefined when off), its losses logged and counted as the
 * `archiveLost` metric.
 */
function decisionArchive(
  config: CommonEnvironment,
  s3: S3Client,
  logger: Logger,
  metrics: Metrics,
  clock: Clock,
): DecisionArchive | undefined {
  const target = config.DECISION_ARCHIVE;
  if (target.kind === "off") return undefined;
  const writer =
    target.kind === "firehose"
      ? new FirehoseArchiveWriter(createFirehoseClient(config.AWS_REGION), target.streamName)
      : new S3ArchiveWriter(s3, target.bucket, target.prefix);
  return new DecisionArchive({
    writer,
    clock,
    maxBufferBytes: config.ARCHIVE_BUFFER_MIB * 1024 * 1024,
    onLost: (records, reason, error) => {
      logger.warn("decisions not archived", { records, reason, ...(error ? { error: error as Error } : {}) });
      const single = metrics.singleMetric();
      single.addMetric("archiveLost", MetricUnit.Count, records);
    },
  });
}

/** Where deferred sends wait (DEFERRALS): the queue's delays and EventBridge Scheduler, the S3 schedules, or none. */
function deferralScheduler(
  config: ReturnType<typeof parseConsumerEnvironment>,
  s3: S3Client,
  sqs: SqsDelayDeferralsClient,
): DeferralScheduler | undefined {
  if (config.DEFERRALS === "") return undefined;
  if (config.DEFERRALS.startsWith("s3://")) {
    const [bucket, ...rest] = config.DEFERRALS.slice("s3://".length).split("/");
    return new S3Schedules(s3, bucket as string, rest.join("/"));
  }
  const scheduler = new SchedulerClient({
    region: config.AWS_REGION,
    ...(config.AWS_ENDPOINT_URL ? { endpoint: config.AWS_ENDPOINT_URL } : {}),
  });
  return new RoutedDeferrals(
    new SqsDelayDeferrals(sqs, config.CAMPAIGN_QUEUE_URL as string),
    new EventBridgeDeferrals(scheduler, {
      groupName: config.DEFERRAL_SCHEDULE_GROUP as string,
      targetArn: config.CAMPAIGN_QUEUE_ARN as string,
      roleArn: config.DEFERRAL_ROLE_ARN as string,
      deadLetterArn: config.DEFERRAL_DLQ_ARN as string,
    }),
  );
}

type SqsDelayDeferralsClient = ConstructorParameters<typeof SqsDelayDeferrals>[0];

/** What a caller may set besides the environment: the clock decisions are made by (default: the system's). */
export interface WiringOptions {
  clock?: Clock;
}

export function wireCampaignConsumer(
  env: NodeJS.ProcessEnv,
  observe: Pick<CampaignConsumerHandlerDeps, "onOutcome"> & WiringOptions = {},
) {
  const clock = observe.clock ?? systemClock;
  const config = parseConsumerEnvironment(env);
  const logger = new Logger({ serviceName: "tollgate-campaign-consumer" });
  const metrics = new Metrics({ namespace: "Tollgate", serviceName: "campaign-consumer" });
  const parts = commonParts(config, logger, metrics);
  const { s3, sqs, cluster, rules } = parts;
  const archive = decisionArchive(config, s3, logger, metrics, clock);
  const epoch = storeEpoch(config, parts, logger, clock);
  const deferrals = deferralScheduler(config, s3, sqs);
  const capper = new Capper({
    store: new RedisCapStore(cluster, {
      deadlineMs: config.REDIS_DEADLINE_MS,
      onRetry: (error) => logger.warn("redis call retried", { error: error.message }),
      epoch,
    }),
    rules: (request) => rules.current(request),
    namespace: config.KEY_NAMESPACE,
    redeliveryMs: config.CAMPAIGN_REDELIVERY_SECONDS * 1000,
    hotRecords: config.CAP_HOT_RECORDS === "on",
    compactClasses: config.CAP_COMPACT_CLASSES === "on",
    clock,
  });
  const consumer = new CampaignConsumer({
    capper,
    delivery: new SqsDeliverySink(sqs, config.DELIVERY_QUEUE_URL, {
      onRetry: (code) => logger.warn("delivery entries retried", { code }),
      maxMessageBytes: config.DELIVERY_MAX_MESSAGE_BYTES,
    }),
    deadLetters: new SqsDeadLetterSink(sqs, config.DEAD_LETTER_QUEUE_URL),
    sendsPerMessage: config.DELIVERY_BATCH_SIZE,
    ...(archive ? { archive } : {}),
    ...(deferrals ? { deferrals } : {}),
  });
  const handler = makeCampaignConsumerHandler({
    consumer,
    logger,
    metrics,
    timeBudgetMarginMs: config.TIME_BUDGET_MARGIN_MS,
    recordsInFlight: config.RECORDS_IN_FLIGHT,
    maxReceiveCount: config.CAMPAIGN_MAX_RECEIVE_COUNT,
    clock,
    ...(archive ? { archive } : {}),
    ...(observe.onOutcome ? { onOutcome: observe.onOutcome } : {}),
  });
  return { handler, consumer, cluster, s3, sqs, config, archive, epoch };
}

/** The check API from its environment: Limiter over Redis (per-request budget), rules for health. */
export function wireCheckApi(env: NodeJS.ProcessEnv, options: WiringOptions = {}) {
  const clock = options.clock ?? systemClock;
  const config = parseCheckApiEnvironment(env);
  const logger = new Logger({ serviceName: "tollgate-check-api" });
  const metrics = new Metrics({ namespace: "Tollgate", serviceName: "check-api" });
  // one invocation at a time, one script call each: nothing for autopipelining to batch; with several at
  // once (CHECK_SLOT_BATCH), the checks of one slot share a call, which batches better than a pipeline
  // Clients syncing straight to Redis learn a quota rule (or its change) only from Redis: the rules are
  // written there as soon as this container loads them, not only before the next sync through this API.
  // each tenant's quota rules live in its own namespace (docs/tenants.md), written for every tenant, one that
  // syncs no rule too: a rule it no longer syncs (removed, or no longer granted) is removed there; and a
  // tenant taken out of the policy has every rule of its namespace removed (the tenant index)
  const publishQuotaRules = (active: Rules) =>
    publishTenantRules(
      {
        index: new RedisTenantIndex(cluster, config.KEY_NAMESPACE, config.CHECK_TIMEOUT_MS),
        publisherOf: (namespace) => quotasOf(tenantOfNamespace(active, namespace)),
        onError: (namespace, error) =>
          logger.warn("quota rules not written to Redis; the next sync writes them", {
            tenantNamespace: namespace,
            error,
          }),
      },
      new Map(
        active.policy.tenancy.list().map((tenant) => [tenant.namespace, tenantQuotaRulesOf(active, tenant)] as const),
      ),
      rulesStampOf(active),
    );
  const parts = commonParts(config, logger, metrics, { autoPipelining: false }, publishQuotaRules);
  const { s3, cluster, rules } = parts;
  const archive = decisionArchive(config, s3, logger, metrics, clock);
  const epoch = storeEpoch(config, parts, logger, clock);
  const limiter = new Limiter({
    store: new RedisLimitStore(cluster, {
      deadlineMs: config.CHECK_TIMEOUT_MS,
      epoch,
      ...(config.CHECK_SLOT_BATCH > 0 ? { slotBatch: { maxPerCall: config.CHECK_SLOT_BATCH } } : {}),
    }),
    namespace: config.KEY_NAMESPACE,
    clock,
  });
  const capper = new Capper({
    // a frequency check without a campaign ID is not idempotent: retry only what surely did not run
    store: new RedisCapStore(cluster, { deadlineMs: config.CHECK_TIMEOUT_MS, retryOn: "not-run", epoch }),
    rules: (request) => rules.current(request),
    namespace: config.KEY_NAMESPACE,
    redeliveryMs: config.CAMPAIGN_REDELIVERY_SECONDS * 1000,
    hotRecords: config.CAP_HOT_RECORDS === "on",
    compactClasses: config.CAP_COMPACT_CLASSES === "on",
    clock,
  });
  const health = async (): Promise<HealthReport> => {
    const redis = await Promise.race([
      // through the guarded calls: a client that ended after an outage is started again by this probe too
      redisCallsOf(cluster)
        .call("health ping", [], () => cluster.ping(), {
          deadlineMs: config.CHECK_TIMEOUT_MS * 4,
          retryOn: "no-answer",
        })
        .then(
          () => "ok" as const,
          () => "unavailable" as const,
        ),
      new Promise<"unavailable">((resolve) => setTimeout(() => resolve("unavailable"), config.CHECK_TIMEOUT_MS * 4)),
    ]);
    // the probed slots (a FLUSHALL or a primary replaced empty shows there), then what this environment knows
    await Promise.race([
      epoch.probe(),
      new Promise((resolve) => setTimeout(resolve, config.CHECK_TIMEOUT_MS * 4).unref()),
    ]).catch(() => {});
    const store = epoch.status();
    // under `pause`, a lost slot refuses its calls until acknowledged: not healthy
    const storeOk = store.lostSlots.length === 0 || store.onStoreLoss === "continue";
    try {
      const { policy, segments } = await rules.current();
      const sizes = segments.sizes();
      const report: HealthReport = {
        ok: redis === "ok" && storeOk,
        redis,
        store,
        policyVersion: policy.version,
        segments: Object.fromEntries(policy.segments.slice(0, -1).map((segment, i) => [segment.name, sizes[i] ?? 0])),
      };
      const { refused } = rules.status();
      if (refused.length > 0) report.refused = refused;
      return report;
    } catch {
      return { ok: false, redis, store, refused: rules.status().refused };
    }
  };
  // one sync service per tenant namespace: its own keys, and only the rules the tenant syncs
  const quotaServices = new Map<string, QuotaSyncService>();
  const quotasOf = (tenant: Tenant): QuotaSyncService => {
    let service = quotaServices.get(tenant.namespace);
    if (!service) {
      const namespace = tenantNamespace(config.KEY_NAMESPACE, tenant.namespace);
      service = new QuotaSyncService({
        store: new RedisQuotaStore(cluster, namespace, config.QUOTA_SYNC_TIMEOUT_MS),
        rules: async (quotaRule) => {
          const active = await rules.current(quotaRule === undefined ? {} : { quotaRule });
          // a tenant taken out of the policy syncs nothing any more
          return tenantQuotaRulesOf(active, tenantOfNamespace(active, tenant.namespace));
        },
        clock,
        // a log line that is also the metric (EMF): counted whether or not per-request metrics are published
        onStateLost: (loss) =>
          logger.error("quota store state lost: rule restored from the policy, no new grants meanwhile", {
            tenant: tenant.name,
            ...loss,
            ...emfCount("Tollgate", QUOTA_STATE_LOST_METRIC, loss.groups.length, clock.now()),
          }),
      });
      quotaServices.set(tenant.namespace, service);
    }
    return service;
  };
  /**
   * The scheduled check (every minute): rules lost with the store's state are restored from the policy, in
   * the namespace of every tenant that syncs them.
   */
  const restoreQuotaRules = async () => {
    const active = await rules.current();
    const losses = await Promise.all(
      active.policy.tenancy
        .list()
        .filter((tenant) => tenant.quotaRules.size > 0)
        .map((tenant) => quotasOf(tenant).restore(tenantQuotaRulesOf(active, tenant))),
    );
    return { restored: [...new Set(losses.flat().map((loss) => loss.rule))] };
  };
  const handler = makeCheckApiHandler({
    limiter,
    frequency: (body) => capper.checkUser(body),
    ...(archive ? { archive } : {}),
    quotaSync: (body, tenant) => quotasOf(tenant).sync(body),
    // the rules in service without a promise when they need no refresh (nearly every request): a then on
    // current() cost three promise layers per request before the route's own work began
    tenancy: (request) =>
      rules.fresh(request)?.policy.tenancy ?? rules.current(request).then((active) => active.policy.tenancy),
    routes: config.CHECK_API_ROUTES,
    health,
    logger,
    metrics,
    clock,
    ...(config.NEGATIVE_CACHE ? { negativeCache: new NegativeCache(clock) } : {}),
  });
  /**
   * Lambda's init phase (and the local stack's start): the Redis connections and the rules, before the first
   * request, so no request's budget pays for them. Never throws: without Redis or rules at init, requests
   * answer as they would later (503 or `onStoreError`), and connect or load again.
   */
  const warm = async (): Promise<WarmUpReport> => {
    const [redis] = await Promise.all([
      warmUp(cluster, { timeoutMs: WARM_UP_MS }),
      // the store epoch's marker (the store initialised on its first start); a failure is tried again by the first call
      Promise.race([epoch.open(), new Promise((resolve) => setTimeout(resolve, WARM_UP_MS).unref())]).catch((error) =>
        logger.warn("store epoch not read at init: the first call reads it", { error }),
      ),
      // a missing or refused policy is reported by the first request that needs it
      Promise.race([rules.current(), new Promise((resolve) => setTimeout(resolve, WARM_UP_MS).unref())]).catch(
        () => {},
      ),
    ]);
    if (!redis.warm) logger.warn("Redis not warm at init: the first requests connect", { error: redis.error });
    return redis;
  };
  return { handler, cluster, config, warm, archive, restoreQuotaRules, epoch };
}

/** A tenant namespace the policy no longer has: it syncs nothing (its rules are removed). */
function removedTenant(namespace: string): Tenant {
  return {
    name: namespace,
    namespace,
    operations: new Set(),
    quotaRules: new Set(),
    peekOnly: false,
    operator: false,
  };
}

/** The policy's tenant of `namespace`, or a removed one. */
function tenantOfNamespace(active: Rules, namespace: string): Tenant {
  return active.policy.tenancy.list().find((tenant) => tenant.namespace === namespace) ?? removedTenant(namespace);
}

/**
 * The quota rules of the rules in service that `tenant` syncs, stamped for the compare-and-set of their
 * writes: a rule the tenant is no longer granted is removed from its namespace like a removed rule.
 */
function tenantQuotaRulesOf(active: Rules, tenant: Pick<Tenant, "quotaRules">) {
  const quotas = new Map([...active.policy.quotas].filter(([name]) => tenant.quotaRules.has(name)));
  return { quotas, stamp: rulesStampOf(active) };
}

/** The stamp of the rules in service, for the compare-and-set of their writes. */
function rulesStampOf({ policyModifiedAt, loadedAt }: Rules): number {
  return rulesStamp(policyModifiedAt ?? 0, loadedAt ?? 0);
}
