// The ElastiCache replication group: cluster mode, Multi-AZ with automatic failover when there are replicas,
// TLS and encryption at rest, an AUTH token from Secrets Manager, a parameter group, slow and engine logs.
import type { RemovalPolicy } from "aws-cdk-lib";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as elasticache from "aws-cdk-lib/aws-elasticache";
import type * as iam from "aws-cdk-lib/aws-iam";
import * as logs from "aws-cdk-lib/aws-logs";
import * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import { Construct } from "constructs";
import { CacheUsers } from "./cache-users.ts";
import type { TollgateConfig } from "./config.ts";

export class Cache extends Construct implements ec2.IConnectable {
  readonly replicationGroup: elasticache.CfnReplicationGroup;
  readonly authToken: secretsmanager.Secret;
  /** With `cacheTenants`: the RBAC user group, each tenant a user and a secret of its own. */
  readonly users?: CacheUsers;
  /** The cache's security group with the Redis port as default: `allowDefaultPortFrom(client)`. */
  readonly connections: ec2.Connections;

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
    // with tenants, RBAC: the AUTH token is the default user's password (ElastiCache takes one or the other)
    if (config.cacheTenants.length > 0)
      this.users = new CacheUsers(this, "Users", {
        config,
        serviceSecret: this.authToken,
        removalPolicy: props.removalPolicy,
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
      // a Multi-AZ transaction log (Valkey 9.0): chosen when the cluster is created (docs/decisions/0080)
      ...(config.durability === "off" ? {} : { durability: config.durability }),
      ...(this.users
        ? { userGroupIds: [this.users.userGroup.ref] }
        : { authToken: this.authToken.secretValue.unsafeUnwrap() }),
      port: config.redisPort,
      cacheSubnetGroupName: subnets.ref,
      cacheParameterGroupName: parameters.ref,
      securityGroupIds: [props.securityGroup.securityGroupId],
      autoMinorVersionUpgrade: true,
      snapshotRetentionLimit: 1,
      logDeliveryConfigurations: [delivery(slowLog, "slow-log"), delivery(engineLog, "engine-log")],
    });
    this.replicationGroup.applyRemovalPolicy(props.removalPolicy);
    this.connections = new ec2.Connections({
      securityGroups: [props.securityGroup],
      defaultPort: ec2.Port.tcp(config.redisPort),
    });
  }

  /**
   * What a client inside the VPC needs to call Redis itself (the Quotas SDK's redisTransport) as `tenant`:
   * ingress from the client's security groups to the cache's on the Redis port (and egress the other way
   * when the client's groups restrict it), and read of the tenant's own Redis password, never the default
   * user's (the functions'). Returns the secret grant.
   */
  grantClientAccess(
    client: ec2.IConnectable,
    grantee: iam.IGrantable,
    tenant: string,
    description = "Quotas client to Redis",
  ): iam.Grant {
    const secret = this.users?.tenantSecrets.get(tenant);
    if (!secret)
      throw new Error(
        `grantCacheAccess: tenant "${tenant}" has no Redis user: add it to the context tollgate:cacheTenants`,
      );
    // from the client's side: the cache's ingress rule then lives in the client's stack (a client stack
    // that references the cache, never the other way round, so no dependency cycle)
    client.connections.allowToDefaultPort(this, description);
    return secret.grantRead(grantee);
  }

  /** host:port of the configuration endpoint, for REDIS_NODES. */
  get configurationEndpoint(): string {
    return `${this.replicationGroup.attrConfigurationEndPointAddress}:${this.replicationGroup.attrConfigurationEndPointPort}`;
  }
}
