// The ElastiCache replication group: cluster mode, Multi-AZ with automatic failover when there are replicas,
// TLS and encryption at rest, an AUTH token from Secrets Manager, a parameter group, slow and engine logs.
import type { RemovalPolicy } from "aws-cdk-lib";
import type * as ec2 from "aws-cdk-lib/aws-ec2";
import * as elasticache from "aws-cdk-lib/aws-elasticache";
import * as logs from "aws-cdk-lib/aws-logs";
import * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import { Construct } from "constructs";
import type { TollgateConfig } from "./config.ts";

export class Cache extends Construct {
  readonly replicationGroup: elasticache.CfnReplicationGroup;
  readonly authToken: secretsmanager.Secret;

  constructor(
    scope: Construct,
    id: string,
    props: { config: TollgateConfig; vpc: ec2.IVpc; securityGroup: ec2.ISecurityGroup; removalPolicy: RemovalPolicy },
  ) {
    super(scope, id);
    const { config } = props;
    // ElastiCache AUTH tokens: 16-128 printable characters, no punctuation to stay within the allowed set
    this.authToken = new secretsmanager.Secret(this, "AuthToken", {
      description: "Tollgate Redis AUTH token",
      generateSecretString: { passwordLength: 64, excludePunctuation: true },
      removalPolicy: props.removalPolicy,
    });
    const subnets = new elasticache.CfnSubnetGroup(this, "Subnets", {
      description: "Tollgate Redis, private subnets",
      subnetIds: props.vpc.isolatedSubnets.map((subnet) => subnet.subnetId),
    });
    const parameters = new elasticache.CfnParameterGroup(this, "Parameters", {
      description: "Tollgate: cluster mode, never evict",
      cacheParameterGroupFamily: config.parameterGroupFamily,
      properties: {
        // the key layout spreads slot groups over shards
        "cluster-enabled": "yes",
        // evicting a block would silently forget sends and let users be over-messaged: fail writes instead
        // (alarmed on memory well before) rather than guess
        "maxmemory-policy": "noeviction",
      },
    });
    const slowLog = new logs.LogGroup(this, "SlowLog", {
      retention: config.logRetentionDays as logs.RetentionDays,
      removalPolicy: props.removalPolicy,
    });
    const engineLog = new logs.LogGroup(this, "EngineLog", {
      retention: config.logRetentionDays as logs.RetentionDays,
      removalPolicy: props.removalPolicy,
    });
    const delivery = (
      logGroup: logs.LogGroup,
      logType: string,
    ): elasticache.CfnReplicationGroup.LogDeliveryConfigurationRequestProperty => ({
      destinationType: "cloudwatch-logs",
      destinationDetails: { cloudWatchLogsDetails: { logGroup: logGroup.logGroupName } },
      logFormat: "json",
      logType,
    });
    this.replicationGroup = new elasticache.CfnReplicationGroup(this, "ReplicationGroup", {
      replicationGroupDescription: "Tollgate frequency caps and rate limits",
      engine: config.engine,
      engineVersion: config.engineVersion,
      cacheNodeType: config.cacheNodeType,
      numNodeGroups: config.shards,
      replicasPerNodeGroup: config.replicasPerShard,
      // dev's single node has no replica to fail over to; ElastiCache requires the flag in cluster mode anyway
      multiAzEnabled: config.multiAz,
      automaticFailoverEnabled: true,
      transitEncryptionEnabled: true,
      atRestEncryptionEnabled: true,
      authToken: this.authToken.secretValue.unsafeUnwrap(),
      port: config.redisPort,
      cacheSubnetGroupName: subnets.ref,
      cacheParameterGroupName: parameters.ref,
      securityGroupIds: [props.securityGroup.securityGroupId],
      autoMinorVersionUpgrade: true,
      snapshotRetentionLimit: 1,
      logDeliveryConfigurations: [delivery(slowLog, "slow-log"), delivery(engineLog, "engine-log")],
    });
    this.replicationGroup.applyRemovalPolicy(props.removalPolicy);
  }

  /** host:port of the configuration endpoint, for REDIS_NODES. */
  get configurationEndpoint(): string {
    return `${this.replicationGroup.attrConfigurationEndPointAddress}:${this.replicationGroup.attrConfigurationEndPointPort}`;
  }
}
