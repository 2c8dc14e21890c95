// Every cdk-nag finding we accept, on the construct it concerns, each with its reason.
import { Validations } from "aws-cdk-lib";
import { Construct, type IConstruct } from "constructs";
import type { TollgateStack } from "./tollgate-stack.ts";

function accept(construct: IConstruct, findings: Record<string, string>): void {
  for (const [id, reason] of Object.entries(findings)) Validations.of(construct).acknowledge({ id, reason });
}

export function acknowledgeFindings(stack: TollgateStack): void {
  const { config, network, cache, storage, functions } = stack;
  const bucketArn = `<${stack.getLogicalId(storage.bucket.node.defaultChild as never)}.Arn>`;
  for (const fn of [functions.consumer, functions.checkApi, functions.quotaSync]) {
    accept(fn, {
      "AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]":
        "CDK's execution policy for the function's own log group; writing logs is all it grants",
      "AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole]":
        "Needed to create and delete the function's ENIs in the VPC; those EC2 actions cannot be scoped to resources",
      "AwsSolutions::AwsSolutions-IAM5[Resource::*]":
        "X-Ray tracing (xray:PutTraceSegments, PutTelemetryRecords) has no resource-level permissions",
      [`AwsSolutions::AwsSolutions-IAM5[Resource::${bucketArn}/config/*]`]:
        "s3:GetObject on the policy prefix only; object names are not known when deploying",
      [`AwsSolutions::AwsSolutions-IAM5[Resource::${bucketArn}/segments/*]`]:
        "s3:GetObject on the segment bitmaps prefix only; bitmaps are added by operators after deploying",
      [`AwsSolutions::AwsSolutions-IAM5[Resource::${bucketArn}/store/*]`]:
        "s3:GetObject and s3:PutObject on the store epoch's marker prefix only (written once by the first function that initialises the counter store, read at cold start)",
      [`AwsSolutions::AwsSolutions-IAM5[Resource::${bucketArn}/accepted/*]`]:
        "s3:GetObject and s3:PutObject on the prefix of accepted bitmaps' copies only (written when a container accepts a bitmap, read by the shrink check of containers started later)",
      "AwsSolutions::AwsSolutions-L1":
        "nodejs24.x on purpose: npm test runs the suite and the synthesized bundles on Node 24; moving to a newer runtime is a tested change, not a default",
      "Serverless::Serverless-LambdaLatestVersion":
        "Same as AwsSolutions-L1: nodejs24.x is the newest runtime the code is tested for",
      "Serverless::Serverless-LambdaDLQ":
        "A Lambda DLQ only catches asynchronous invocations: the consumer is invoked by SQS (its queue's redrive policy is the DLQ), the check API and QuotaSync synchronously by their Function URLs; QuotaSync's one asynchronous caller, the minute's restore schedule, is redone by the next minute",
    });
  }
  accept(stack.cacheRotation.function, {
    "AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]":
      "CDK's execution policy for the function's own log group; writing logs is all it grants",
    "AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole]":
      "Needed to create and delete the function's ENIs in the VPC; those EC2 actions cannot be scoped to resources",
    "AwsSolutions::AwsSolutions-IAM5[Resource::*]":
      "secretsmanager:GetRandomPassword (granted by the RotationSchedule) and X-Ray have no resource-level permissions",
    "AwsSolutions::AwsSolutions-L1":
      "nodejs24.x on purpose: npm test runs the suite and the synthesized bundles on Node 24",
    "Serverless::Serverless-LambdaLatestVersion": "Same as AwsSolutions-L1",
    "Serverless::Serverless-LambdaDLQ":
      "Secrets Manager invokes each rotation step and retries a failed one itself; a DLQ would hold nothing to act on",
    "Serverless::Serverless-LambdaTracing":
      "A rotation every 30 days: its log lines say each step, tracing adds nothing",
  });
  if (!config.tracing) {
    for (const fn of [functions.consumer, functions.checkApi, functions.quotaSync]) {
      accept(fn, {
        "Serverless::Serverless-LambdaTracing":
          "Tracing is a setting (tollgate:tracing, on in the prod profile): X-Ray costs per trace and its VPC endpoint per hour, which a dev stack should not pay for",
      });
    }
  }
  if (!config.multiAz) {
    accept(cache.replicationGroup, {
      "AwsSolutions::AwsSolutions-AEC4":
        "Single-AZ only when tollgate:replicasPerShard is 0 (the dev profile): one small node for trying and staging; the prod profile is Multi-AZ with automatic failover",
    });
  }
  accept(functions.quotaRestore, {
    "Serverless::Serverless-EventBusDLQ":
      "The restore runs every minute and does the same work each time: an invocation that failed is redone by the next one, a queued event would only repeat it",
  });
  accept(functions.consumer, {
    "Serverless::Serverless-LambdaEventSourceMappingDestination":
      "SQS event sources do not support on-failure destinations; failed records return to the queue and its redrive policy moves them to the campaign DLQ",
  });
  accept(cache.authToken, {
    "AwsSolutions::AwsSolutions-SMG4":
      "An ElastiCache AUTH token rotates through ModifyReplicationGroup (ROTATE, then SET), which no managed rotation Lambda does; the runbook is in docs/OPERATIONS.md",
  });
  if (cache.users) {
    accept(cache.replicationGroup, {
      "AwsSolutions::AwsSolutions-AEC6":
        "With cacheTenants the cache authenticates by RBAC users (a user group: the functions' default user and one user per tenant, docs/tenants.md), which replaces the AUTH token",
    });
    for (const secret of cache.users.tenantSecrets.values())
      accept(secret, {
        "AwsSolutions::AwsSolutions-SMG4":
          "An ElastiCache RBAC user's password changes through ModifyUser, which no managed rotation Lambda does; the runbook is in docs/tenants.md",
      });
  }
  if (functions.checkApiCapacity) {
    accept(functions.checkApiCapacity, {
      "AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AWSLambdaManagedEC2ResourceOperator]":
        "The capacity provider's operator role: AWS's policy for Lambda to launch, tag and end this capacity provider's EC2 instances and their network interfaces, kept current by AWS as the service's needs change",
    });
  }
  accept(network.vpc, {
    "AwsSolutions::AwsSolutions-EC23":
      "The interface endpoints' security groups admit HTTPS from the VPC's own CIDR only (an intrinsic the rule cannot evaluate), not 0.0.0.0/0",
  });
  if (stack.observability.alarmTopic instanceof Construct) {
    accept(stack.observability.alarmTopic, {
      "Serverless::Serverless-SNSRedrivePolicy":
        "The only subscription is an operator's email: an undelivered notification has no consumer to redrive to, and the alarm itself stays in ALARM on the dashboard",
    });
  }
  const archiveArn = `<${stack.getLogicalId(stack.archive.bucket.node.defaultChild as never)}.Arn>`;
  accept(stack.archive.node.findChild("DeliveryRole"), {
    [`AwsSolutions::AwsSolutions-IAM5[Resource::${archiveArn}/*]`]:
      "Firehose writes objects under partitions named by arrival time: the keys are not known when deploying",
  });
  for (const dlq of [storage.campaignDeadLetters, storage.deliveryDeadLetters]) {
    accept(dlq, {
      "Serverless::Serverless-SQSRedrivePolicy":
        "A dead-letter queue is the end of the line: messages wait there for inspection and redrive",
    });
  }
  accept(storage.deferralDeadLetters, {
    "AwsSolutions::AwsSolutions-SQS3":
      "It is the dead-letter queue of the deferral schedules (their targets' DeadLetterConfig, set per schedule by the consumer), which cdk-nag cannot see on a queue",
    "Serverless::Serverless-SQSRedrivePolicy":
      "A dead-letter queue is the end of the line: messages wait there for inspection and redrive",
  });
}
