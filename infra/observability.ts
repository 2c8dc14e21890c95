// A dashboard (decisions per segment and channel, check API latency and denials, DLQ depth, Redis CPU and
// memory, the Quotas clients and their sync route), the alarms an operator needs (DLQ not empty, consumer errors, Redis memory/CPU, queue age, Quotas state lost), and
// optionally an SNS topic they notify.
import { Duration, type RemovalPolicy } from "aws-cdk-lib";
import * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import * as actions from "aws-cdk-lib/aws-cloudwatch-actions";
import * as sns from "aws-cdk-lib/aws-sns";
import * as subscriptions from "aws-cdk-lib/aws-sns-subscriptions";
import { Construct } from "constructs";
import type { Cache } from "./cache.ts";
import type { TollgateConfig } from "./config.ts";
import type { Functions } from "./functions.ts";
import type { Storage } from "./storage.ts";

export class Observability extends Construct {
  readonly alarms: cloudwatch.Alarm[] = [];
  /** Where the alarms notify: a topic created for `alarmEmail`, the one of `alarmTopicArn`, or none. */
  readonly alarmTopic: sns.ITopic | undefined;

  constructor(
    scope: Construct,
    id: string,
    props: {
      config: TollgateConfig;
      cache: Cache;
      functions: Functions;
      storage: Storage;
      removalPolicy: RemovalPolicy;
    },
  ) {
    super(scope, id);
    const { config, cache, functions, storage } = props;
    this.alarmTopic = alarmTopic(this, config, props.removalPolicy);
    const period = Duration.minutes(5);
    const decisions = (metric: string) =>
      new cloudwatch.MathExpression({
        expression: `SEARCH('{Tollgate,channel,segment,service} MetricName="${metric}"', 'Sum', 300)`,
        label: metric,
        period,
      });
    const heldByZone = (metric: string) =>
      new cloudwatch.MathExpression({
        expression: `SEARCH('{Tollgate,channel,service,zone} MetricName="${metric}"', 'Sum', 300)`,
        label: metric,
        period,
      });
    const redis = (metric: string) =>
      new cloudwatch.Metric({
        namespace: "AWS/ElastiCache",
        metricName: metric,
        dimensionsMap: { ReplicationGroupId: cache.replicationGroup.ref },
        statistic: "Maximum",
        period,
      });
    // The Quotas SDK's emfMetrics, published by each client service in its own Powertools Metrics (dimension
    // `service` only) under config.quotasMetricsNamespace: one line per client service
    const quotas = (metric: string, statistic: string, label: string) =>
      new cloudwatch.MathExpression({
        expression: `SEARCH('{${config.quotasMetricsNamespace},service} MetricName="${metric}"', '${statistic}', 300)`,
        label,
        period,
      });
    const checkApiMetric = (metric: string) =>
      new cloudwatch.Metric({
        namespace: "Tollgate",
        metricName: metric,
        dimensionsMap: { service: "check-api" },
        statistic: "Sum",
        period,
      });
    const dlqDepth = (queue: Storage["campaignDeadLetters"]) =>
      queue.metricApproximateNumberOfMessagesVisible({ period: Duration.minutes(1), statistic: "Maximum" });

    new cloudwatch.Dashboard(this, "Dashboard", {
      dashboardName: `${config.name}-overview`,
      widgets: [
        [
          new cloudwatch.GraphWidget({
            title: "Allowed sends by segment and channel",
            left: [decisions("allowed")],
            width: 12,
          }),
          new cloudwatch.GraphWidget({
            title: "Capped and displaced sends by segment and channel",
            // displaced: refused by room a cap keeps for higher priorities (the consumer's `displaced` count)
            left: [decisions("capped"), decisions("displaced")],
            width: 12,
          }),
        ],
        [
          new cloudwatch.GraphWidget({
            title: "Check API latency",
            left: ["p50", "p99"].map((statistic) => functions.checkApi.metricDuration({ statistic, period })),
            width: 12,
          }),
          new cloudwatch.GraphWidget({
            title: "Check API denials by algorithm",
            left: [
              new cloudwatch.MathExpression({
                expression: `SEARCH('{Tollgate,algorithm,service} MetricName="denied"', 'Sum', 300)`,
                label: "denied",
                period,
              }),
            ],
            width: 12,
          }),
        ],
        [
          new cloudwatch.GraphWidget({
            title: "Dead-letter queues",
            left: [dlqDepth(storage.campaignDeadLetters), dlqDepth(storage.deliveryDeadLetters)],
            width: 8,
          }),
          new cloudwatch.GraphWidget({ title: "Redis engine CPU %", left: [redis("EngineCPUUtilization")], width: 8 }),
          new cloudwatch.GraphWidget({
            title: "Redis memory %",
            left: [redis("DatabaseMemoryUsagePercentage")],
            width: 8,
          }),
        ],
        // Quiet hours: sends held back by zone, the deferred messages, and deferrals the scheduler could not send
        [
          new cloudwatch.GraphWidget({
            title: "Quiet hours: held sends by zone and channel",
            left: [heldByZone("quietDropped"), heldByZone("sendsDeferred"), heldByZone("droppedAfterDeferral")],
            width: 12,
          }),
          new cloudwatch.GraphWidget({
            title: "Deferred messages and the deferral DLQ",
            left: [
              new cloudwatch.Metric({
                namespace: "Tollgate",
                metricName: "deferredMessages",
                dimensionsMap: { service: "campaign-consumer" },
                statistic: "Sum",
                period,
              }),
            ],
            right: [dlqDepth(storage.deferralDeadLetters)],
            width: 12,
          }),
        ],
        // Quotas: what the clients decided, how fresh their allowances are, and the sync route they call
        [
          new cloudwatch.GraphWidget({
            title: "Quotas: admitted and denied by service",
            left: [quotas("QuotasAdmitted", "Sum", "admitted"), quotas("QuotasDenied", "Sum", "denied")],
            width: 6,
          }),
          new cloudwatch.GraphWidget({
            title: "Quotas: sync latency p99 and allowance age (ms)",
            left: [quotas("QuotasSyncLatency", "p99", "sync latency p99")],
            right: [quotas("QuotasAllowanceAge", "Maximum", "allowance age max")],
            width: 6,
          }),
          new cloudwatch.GraphWidget({
            title: "Quotas: time degraded (ms) and sync errors",
            left: [quotas("QuotasDegraded", "Maximum", "degraded max")],
            right: [quotas("QuotasSyncErrors", "Sum", "sync errors")],
            width: 6,
          }),
          new cloudwatch.GraphWidget({
            title: "Quotas sync route (POST /v1/quotas/sync, the QuotaSync function)",
            left: [checkApiMetric("quotaSyncs"), checkApiMetric("quotaSyncKeys")],
            right: [
              functions.quotaSync.metricThrottles({ period, label: "throttles" }),
              functions.quotaSync.metricErrors({ period, label: "errors" }),
            ],
            width: 6,
          }),
        ],
      ],
    });

    const alarm = (id: string, metric: cloudwatch.IMetric, threshold: number, description: string) => {
      const created = new cloudwatch.Alarm(this, id, {
        metric,
        threshold,
        evaluationPeriods: 1,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
        alarmDescription: description,
      });
      if (this.alarmTopic) created.addAlarmAction(new actions.SnsAction(this.alarmTopic));
      this.alarms.push(created);
      return created;
    };
    alarm(
      "CampaignDlqNotEmpty",
      dlqDepth(storage.campaignDeadLetters),
      1,
      "Campaign batches in the DLQ: read their reason attribute, fix, redrive (docs/OPERATIONS.md)",
    );
    alarm(
      "DeliveryDlqNotEmpty",
      dlqDepth(storage.deliveryDeadLetters),
      1,
      "Delivery messages in the DLQ: the delivery consumer is failing",
    );
    alarm(
      "DeferralDlqNotEmpty",
      dlqDepth(storage.deferralDeadLetters),
      1,
      "Deferred campaign batches the scheduler could not send to the campaign queue: redrive them to it (docs/quiet-hours.md)",
    );
    alarm(
      "ConsumerErrors",
      functions.consumer.metricErrors({ period }),
      1,
      "The campaign consumer threw: Redis down or a bug; batches are retried",
    );
    alarm(
      "RedisMemoryHigh",
      redis("DatabaseMemoryUsagePercentage"),
      80,
      "Redis memory over 80%: with noeviction, writes fail when full; scale out",
    );
    alarm("RedisCpuHigh", redis("EngineCPUUtilization"), 80, "Redis engine CPU over 80% on a node");
    alarm(
      "QuotaStateLost",
      new cloudwatch.Metric({ namespace: "Tollgate", metricName: "QuotaStateLost", statistic: "Sum", period }),
      1,
      "Quota rules were gone from Redis (FLUSHALL, a node back empty): restored from the policy, their slot groups grant nothing new for one window plus the lease (docs/quotas.md)",
    );
    alarm(
      "StoreLost",
      new cloudwatch.Metric({ namespace: "Tollgate", metricName: "StoreLost", statistic: "Sum", period }),
      1,
      "Caps or limits found hash slots of the counter store without their epoch key (FLUSHALL, a node replaced empty): under onStoreLoss pause nothing counts there until `tollgate store acknowledge` (docs/OPERATIONS.md)",
    );
    alarm(
      "CampaignQueueOld",
      storage.campaignQueue.metricApproximateAgeOfOldestMessage({ period, statistic: "Maximum" }),
      900,
      "Campaign batches waiting over 15 minutes: consumers too few (maxConcurrency) or failing",
    );
  }
}

function alarmTopic(scope: Construct, config: TollgateConfig, removalPolicy: RemovalPolicy): sns.ITopic | undefined {
  if (config.alarmTopicArn) return sns.Topic.fromTopicArn(scope, "AlarmTopic", config.alarmTopicArn);
  if (!config.alarmEmail) return undefined;
  const topic = new sns.Topic(scope, "AlarmTopic", { displayName: `${config.name} alarms`, enforceSSL: true });
  topic.applyRemovalPolicy(removalPolicy);
  topic.addSubscription(new subscriptions.EmailSubscription(config.alarmEmail));
  return topic;
}
