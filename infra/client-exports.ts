// What a client service in another CDK app (or none) needs to use Tollgate, without a reference to this
// stack's constructs: SSM parameters and exported outputs (the quota sync URL, the cache's endpoint, port,
// security group and subnets, the AUTH secret's ARN), and two managed policies to attach to its roles.
// The same grants as `grantQuotaSync` and `grantCacheAccess`, for a role this app never sees.
import { CfnOutput, Fn, Stack } from "aws-cdk-lib";
import * as iam from "aws-cdk-lib/aws-iam";
import * as ssm from "aws-cdk-lib/aws-ssm";
import { Construct } from "constructs";
import type { Cache } from "./cache.ts";
import type { TollgateConfig } from "./config.ts";
import type { Functions } from "./functions.ts";
import type { Network } from "./network.ts";

/** The parameters' names under `/<name>/clients/` (`tollgate:name`), the same in every deployment. */
export const CLIENT_PARAMETERS = {
  quotaSyncUrl: "quota-sync-url",
  quotaSyncPolicyArn: "quota-sync-policy-arn",
  cacheClientPolicyArn: "cache-client-policy-arn",
  redisConfigurationEndpoint: "redis-configuration-endpoint",
  redisPort: "redis-port",
  redisAuthSecretArn: "redis-auth-secret-arn",
  cacheSecurityGroupId: "cache-security-group-id",
  vpcId: "vpc-id",
  clientSubnetIds: "client-subnet-ids",
} as const;

export function clientParameterName(name: string, parameter: keyof typeof CLIENT_PARAMETERS): string {
  return `/${name}/clients/${CLIENT_PARAMETERS[parameter]}`;
}

export class ClientExports extends Construct {
  /** `POST /v1/quotas/sync` through the QuotaSync Function URL, nothing else (what `grantQuotaSync` grants). */
  readonly quotaSyncPolicy: iam.ManagedPolicy;
  /** Read of the AUTH token's secret (the IAM half of `grantCacheAccess`; the port is a security group rule). */
  readonly cacheClientPolicy: iam.ManagedPolicy;

  constructor(
    scope: Construct,
    id: string,
    props: { config: TollgateConfig; network: Network; cache: Cache; functions: Functions },
  ) {
    super(scope, id);
    const { config, network, cache, functions } = props;
    const quotaSyncArn = functions.quotaSync.functionArn;
    // the two statements Function URLs require, as lambda.Function.grantInvokeUrl writes them
    this.quotaSyncPolicy = new iam.ManagedPolicy(this, "QuotaSyncPolicy", {
      description: "Tollgate: POST /v1/quotas/sync at the QuotaSync Function URL (AWS_IAM), nothing else",
      statements: [
        new iam.PolicyStatement({
          actions: ["lambda:InvokeFunctionUrl"],
          resources: [quotaSyncArn],
          conditions: { StringEquals: { "lambda:FunctionUrlAuthType": "AWS_IAM" } },
        }),
        new iam.PolicyStatement({
          actions: ["lambda:InvokeFunction"],
          resources: [quotaSyncArn],
          conditions: { Bool: { "lambda:InvokedViaFunctionUrl": "true" } },
        }),
      ],
    });
    this.cacheClientPolicy = new iam.ManagedPolicy(this, "CacheClientPolicy", {
      description: "Tollgate: read the Redis AUTH token's secret (a client in the VPC calling Redis itself)",
      statements: [
        new iam.PolicyStatement({
          actions: ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
          resources: [cache.authToken.secretArn],
        }),
      ],
    });
    // another account's principals: the function's resource policy admits the account, whose own IAM
    // then decides which of its roles may call (they still need the same two actions on this ARN)
    for (const account of config.quotaSyncAccounts) functions.grantQuotaSync(new iam.AccountPrincipal(account));

    const subnetIds = network.vpc.selectSubnets(network.clientSubnets).subnetIds;
    const values: Record<keyof typeof CLIENT_PARAMETERS, [string, string]> = {
      quotaSyncUrl: [functions.quotaSyncUrl.url, "QuotaSync Function URL (AWS_IAM): POST /v1/quotas/sync alone"],
      quotaSyncPolicyArn: [this.quotaSyncPolicy.managedPolicyArn, "managed policy: quota sync, nothing else"],
      cacheClientPolicyArn: [this.cacheClientPolicy.managedPolicyArn, "managed policy: read the AUTH secret"],
      redisConfigurationEndpoint: [cache.configurationEndpoint, "host:port of the cache (TLS)"],
      redisPort: [String(config.redisPort), "the cache's port"],
      redisAuthSecretArn: [cache.authToken.secretArn, "the AUTH token's secret; re-read it on an auth failure"],
      cacheSecurityGroupId: [
        network.redisSecurityGroup.securityGroupId,
        "the cache's security group: add an ingress rule from the client's on the cache's port",
      ],
      vpcId: [network.vpc.vpcId, "the VPC a client calling Redis itself runs in"],
      clientSubnetIds: [Fn.join(",", subnetIds), "the subnets a client in the VPC runs in (comma-separated)"],
    };
    const stackName = Stack.of(this).stackName;
    for (const [key, [value, description]] of Object.entries(values) as [
      keyof typeof CLIENT_PARAMETERS,
      [string, string],
    ][]) {
      const pascal = key.charAt(0).toUpperCase() + key.slice(1);
      new ssm.StringParameter(this, `${pascal}Parameter`, {
        parameterName: clientParameterName(config.name, key),
        stringValue: value,
        description: `Tollgate: ${description}`,
      });
      new CfnOutput(Stack.of(this), `Export${pascal}`, { value, description, exportName: `${stackName}-${pascal}` });
    }
  }
}
