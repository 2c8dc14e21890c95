// The config bucket (policy and segment bitmaps) and the SQS queues with their dead-letter queues.
import { Duration, RemovalPolicy } from "aws-cdk-lib";
import * as s3 from "aws-cdk-lib/aws-s3";
import * as sqs from "aws-cdk-lib/aws-sqs";
import { Construct } from "constructs";

/** The campaign queue's redrive: the consumer dead-letters a record failing on this receive with its reason. */
export const CAMPAIGN_MAX_RECEIVE_COUNT = 5;
/** The delivery queue's MaximumMessageSize: SQS's largest (1 MiB); the consumer splits messages to fit it. */
export const DELIVERY_MAX_MESSAGE_BYTES = 1_048_576;

export class Storage extends Construct {
  readonly bucket: s3.Bucket;
  /** Server access logs of the stack's buckets. */
  readonly accessLogs: s3.Bucket;
  readonly campaignQueue: sqs.Queue;
  readonly campaignDeadLetters: sqs.Queue;
  readonly deliveryQueue: sqs.Queue;
  readonly deliveryDeadLetters: sqs.Queue;
  /** Where a deferral schedule's message goes when EventBridge Scheduler could not send it to the campaign queue. */
  readonly deferralDeadLetters: sqs.Queue;
  /** How long a campaign message can come back by itself: visibility timeout × maxReceiveCount. */
  readonly campaignRedeliverySeconds: number;

  constructor(scope: Construct, id: string, props: { consumerTimeout: Duration; removalPolicy: RemovalPolicy }) {
    super(scope, id);
    // a bucket that still holds objects cannot be deleted: with "destroy", CDK's custom resource empties it
    // (every version) first, so `cdk destroy` leaves nothing behind
    const autoDeleteObjects = props.removalPolicy === RemovalPolicy.DESTROY;
    const accessLogs = new s3.Bucket(this, "AccessLogs", {
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      encryption: s3.BucketEncryption.S3_MANAGED,
      enforceSSL: true,
      objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
      lifecycleRules: [{ expiration: Duration.days(90) }],
      removalPolicy: props.removalPolicy,
      autoDeleteObjects,
    });
    this.accessLogs = accessLogs;
    this.bucket = new s3.Bucket(this, "Config", {
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      encryption: s3.BucketEncryption.S3_MANAGED,
      enforceSSL: true,
      // a bad policy or bitmap upload can be rolled back to the previous version
      versioned: true,
      serverAccessLogsBucket: accessLogs,
      serverAccessLogsPrefix: "config/",
      lifecycleRules: [{ noncurrentVersionExpiration: Duration.days(30), noncurrentVersionsToRetain: 10 }],
      removalPolicy: props.removalPolicy,
      autoDeleteObjects,
    });
    const queue = (name: string, props2: sqs.QueueProps) =>
      new sqs.Queue(this, name, {
        encryption: sqs.QueueEncryption.SQS_MANAGED,
        enforceSSL: true,
        removalPolicy: props.removalPolicy,
        ...props2,
      });
    // the DLQs keep messages longer than their source queues, so nothing expires before it is redriven
    this.campaignDeadLetters = queue("CampaignDeadLetters", { retentionPeriod: Duration.days(14) });
    // at least 6 times the consumer's timeout (AWS guidance for Lambda event sources)
    const visibilitySeconds = props.consumerTimeout.toSeconds() * 6;
    this.campaignRedeliverySeconds = visibilitySeconds * CAMPAIGN_MAX_RECEIVE_COUNT;
    this.campaignQueue = queue("Campaign", {
      visibilityTimeout: Duration.seconds(visibilitySeconds),
      retentionPeriod: Duration.days(4),
      deadLetterQueue: { queue: this.campaignDeadLetters, maxReceiveCount: CAMPAIGN_MAX_RECEIVE_COUNT },
    });
    this.deliveryDeadLetters = queue("DeliveryDeadLetters", { retentionPeriod: Duration.days(14) });
    this.deferralDeadLetters = queue("DeferralDeadLetters", { retentionPeriod: Duration.days(14) });
    this.deliveryQueue = queue("Delivery", {
      maxMessageSizeBytes: DELIVERY_MAX_MESSAGE_BYTES,
      retentionPeriod: Duration.days(4),
      deadLetterQueue: { queue: this.deliveryDeadLetters, maxReceiveCount: 5 },
    });
  }
}
