// The whole system in one stack: network, cache, storage, functions, observability, and the outputs a
// user needs to push campaigns and call the check API.
import { CfnOutput, Duration, RemovalPolicy, Stack, type StackProps } from "aws-cdk-lib";
import type * as ec2 from "aws-cdk-lib/aws-ec2";
import type * as iam from "aws-cdk-lib/aws-iam";
import type { Construct } from "constructs";
import { Cache } from "./cache.ts";
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
  readonly storage: Storage;
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
    const storage = new Storage(this, "Storage", {
      consumerTimeout: Duration.seconds(config.consumerTimeoutSeconds),
      removalPolicy,
    });
    this.storage = storage;
    this.functions = new Functions(this, "Functions", { config, network, cache, storage, removalPolicy });
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
    new CfnOutput(this, "RedisConfigurationEndpoint", { value: cache.configurationEndpoint });
    new CfnOutput(this, "RedisAuthSecretArn", {
      value: cache.authToken.secretArn,
      description: "The Redis AUTH token (in-VPC Quotas clients read it)",
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
   * A Quotas client inside the VPC (run it in `network.vpc`'s private subnets): its security groups may
   * reach the cache on the Redis port, and its role may read the AUTH token's secret.
   */
  grantCacheAccess(client: ec2.IConnectable, grantee: iam.IGrantable): iam.Grant {
    return this.cache.grantClientAccess(client, grantee);
  }
}
