// The whole system in one stack: network, cache, storage, functions, observability, and the outputs a
// user needs to push campaigns and call the check API.
import { CfnOutput, Duration, RemovalPolicy, Stack, type StackProps } from "aws-cdk-lib";
import type * as ec2 from "aws-cdk-lib/aws-ec2";
import type * as iam from "aws-cdk-lib/aws-iam";
import type { Construct } from "constructs";
import { tenantUserName } from "../functions/app/tenant-redis-users.ts";
import { Archive } from "./archive.ts";
import { Cache } from "./cache.ts";
import { CacheRotation } from "./cache-rotation.ts";
import { ClientExports } from "./client-exports.ts";
import { readConfig, type TollgateConfig } from "./config.ts";
import { Functions } from "./functions.ts";
import { Network } from "./network.ts";
import { Observability } from "./observability.ts";
import { Storage } from "./storage.ts";

export class TollgateStack extends Stack {
  readonly config: TollgateConfig;
  readonly network: Network;
  readonly cache: Cache;
  /** The function that rotates the cache passwords (the AUTH token, or each RBAC user's) every 30 days. */
  readonly cacheRotation: CacheRotation;
  readonly storage: Storage;
  readonly archive: Archive;
  readonly functions: Functions;
  readonly observability: Observability;
  /** SSM parameters, exported outputs and managed policies for client services in other apps. */
  readonly clientExports: ClientExports;

  constructor(scope: Construct, id: string, props?: StackProps) {
    super(scope, id, props);
    const config = readConfig(this.node);
    this.config = config;
    const removalPolicy = config.removalPolicy === "destroy" ? RemovalPolicy.DESTROY : RemovalPolicy.RETAIN;
    const network = new Network(this, "Network", {
      redisPort: config.redisPort,
      availabilityZones: config.availabilityZones,
      tracing: config.tracing,
      logRetentionDays: config.logRetentionDays,
      clientNetwork: config.clientNetwork,
      removalPolicy,
    });
    this.network = network;
    const cache = new Cache(this, "Cache", {
      config,
      vpc: network.vpc,
      securityGroup: network.redisSecurityGroup,
      removalPolicy,
    });
    this.cache = cache;
    this.cacheRotation = new CacheRotation(this, "CacheRotation", { config, network, cache, removalPolicy });
    const storage = new Storage(this, "Storage", {
      consumerTimeout: Duration.seconds(config.consumerTimeoutSeconds),
      removalPolicy,
    });
    this.storage = storage;
    const archive = new Archive(this, "Archive", {
      accessLogs: storage.accessLogs,
      removalPolicy,
      retentionDays: 400,
    });
    this.archive = archive;
    this.functions = new Functions(this, "Functions", { config, network, cache, storage, archive, removalPolicy });
    this.observability = new Observability(this, "Observability", {
      config,
      cache,
      functions: this.functions,
      storage,
      removalPolicy,
    });

    this.clientExports = new ClientExports(this, "Clients", { config, network, cache, functions: this.functions });

    new CfnOutput(this, "FunctionUrl", {
      value: this.functions.checkApiUrl.url,
      description: "Check API (AWS_IAM auth)",
    });
    new CfnOutput(this, "QuotaSyncUrl", {
      value: this.functions.quotaSyncUrl.url,
      description: "POST /v1/quotas/sync alone, for Quotas clients outside the VPC (AWS_IAM auth, grantQuotaSync)",
    });
    new CfnOutput(this, "CampaignQueueUrl", { value: storage.campaignQueue.queueUrl });
    new CfnOutput(this, "DeliveryQueueUrl", { value: storage.deliveryQueue.queueUrl });
    new CfnOutput(this, "DeadLetterQueueUrl", { value: storage.campaignDeadLetters.queueUrl });
    new CfnOutput(this, "ConfigBucket", { value: storage.bucket.bucketName });
    new CfnOutput(this, "ArchiveBucket", {
      value: archive.bucket.bucketName,
      description: "The decision archive (tollgate why / campaign report --bucket; Athena workgroup *-archive)",
    });
    new CfnOutput(this, "RedisConfigurationEndpoint", { value: cache.configurationEndpoint });
    new CfnOutput(this, "RedisAuthSecretArn", {
      value: cache.authToken.secretArn,
      description: "The functions' Redis AUTH token (the default user's password with cacheTenants)",
    });
    for (const [tenant, secret] of cache.users?.tenantSecrets ?? [])
      new CfnOutput(this, `RedisTenantSecretArn${tenant.replace(/[^A-Za-z0-9]/g, "")}`, {
        value: secret.secretArn,
        description: `The Redis password of tenant ${tenant} (user ${tenantUserName(tenant)})`,
      });
  }

  /**
   * A Quotas client outside the VPC: its role may call `POST /v1/quotas/sync` at `QuotaSyncUrl` (IAM auth),
   * and no other route: the URL is the check API's `quotas` alias's, which serves quota sync alone.
   */
  grantQuotaSync(grantee: iam.IGrantable): iam.Grant {
    return this.functions.grantQuotaSync(grantee);
  }

  /**
   * A Quotas client inside the VPC (run it in `network.vpc`'s private subnets) acting for `tenant` (one of
   * `cacheTenants`): its security groups may reach the cache on the Redis port, and its role may read the
   * tenant's Redis password (output `RedisTenantSecretArns`), never the functions' AUTH token.
   */
  grantCacheAccess(client: ec2.IConnectable, grantee: iam.IGrantable, tenant: string): iam.Grant {
    return this.cache.grantClientAccess(client, grantee, tenant);
  }
}
