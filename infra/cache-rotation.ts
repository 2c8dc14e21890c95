// Automatic rotation of the cache's passwords without downtime (docs/deploy.md): one function, in the VPC,
// is the rotation Lambda of the AUTH token's secret and of every tenant user's secret. For the AUTH token it
// runs ElastiCache's ROTATE then SET; with RBAC users (tollgate:cacheTenants) ModifyUser with both passwords,
// then the new one alone. It may change those and nothing else: ModifyReplicationGroup on the one group,
// ModifyUser on the stack's users; Secrets Manager's own grants come from each RotationSchedule.
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Arn, ArnFormat, Duration, type RemovalPolicy, Stack } from "aws-cdk-lib";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as iam from "aws-cdk-lib/aws-iam";
import * as lambda from "aws-cdk-lib/aws-lambda";
import * as nodejs from "aws-cdk-lib/aws-lambda-nodejs";
import * as logs from "aws-cdk-lib/aws-logs";
import type * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import { Construct } from "constructs";
import type { RotationVariables } from "../functions/app/environment.ts";
import type { RotationTarget } from "../functions/core/shared/credential-rotation.ts";
import type { Cache } from "./cache.ts";
import type { TollgateConfig } from "./config.ts";
import { bundling } from "./functions.ts";
import type { Network } from "./network.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
/** How often each password is rotated. */
export const ROTATION_DAYS = 30;

export interface CacheRotationProps {
  config: TollgateConfig;
  network: Network;
  cache: Cache;
  removalPolicy: RemovalPolicy;
}

export class CacheRotation extends Construct {
  readonly function: nodejs.NodejsFunction;
  readonly schedules: secretsmanager.RotationSchedule[];

  constructor(scope: Construct, id: string, props: CacheRotationProps) {
    super(scope, id);
    const { config, network, cache } = props;
    const users = cache.users?.usersBySecret ?? [];
    const targets: { secret: secretsmanager.ISecret; target: RotationTarget }[] = cache.users
      ? users.map(({ secret, userId, userName }) => ({ secret, target: { kind: "user", userId, userName } }))
      : [{ secret: cache.authToken, target: { kind: "auth-token", replicationGroupId: cache.replicationGroup.ref } }];
    const stack = Stack.of(this);
    const variables: RotationVariables = {
      REDIS_NODES: cache.configurationEndpoint,
      REDIS_TLS: "true",
      CACHE_ROTATION_TARGETS: stack.toJsonString(
        Object.fromEntries(targets.map(({ secret, target }) => [secret.secretArn, target])),
      ),
    };
    this.function = new nodejs.NodejsFunction(this, "Function", {
      runtime: lambda.Runtime.NODEJS_24_X,
      architecture: config.architecture === "arm64" ? lambda.Architecture.ARM_64 : lambda.Architecture.X86_64,
      entry: join(root, "functions/entry/cache-rotation-lambda.ts"),
      projectRoot: root,
      depsLockFilePath: join(root, "package-lock.json"),
      bundling,
      // testSecret connects to the cache; the AWS APIs through the VPC's endpoints (Secrets Manager, ElastiCache)
      vpc: network.vpc,
      vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
      securityGroups: [network.lambdaSecurityGroup],
      // an ElastiCache change applies in minutes: a step waits for it (ROTATION_WAIT_SECONDS, 10 min)
      timeout: Duration.minutes(15),
      memorySize: 256,
      tracing: config.tracing ? lambda.Tracing.ACTIVE : lambda.Tracing.DISABLED,
      environment: { ...variables, NODE_OPTIONS: "--enable-source-maps" },
      logGroup: new logs.LogGroup(this, "Logs", {
        retention: config.logRetentionDays as logs.RetentionDays,
        removalPolicy: props.removalPolicy,
      }),
    });
    const arnOf = (resource: string, resourceName: string) =>
      Arn.format({ service: "elasticache", resource, resourceName, arnFormat: ArnFormat.COLON_RESOURCE_NAME }, stack);
    if (cache.users) {
      this.function.addToRolePolicy(
        new iam.PolicyStatement({
          actions: ["elasticache:ModifyUser", "elasticache:DescribeUsers"],
          resources: users.map(({ userId }) => arnOf("user", userId)),
        }),
      );
    } else {
      this.function.addToRolePolicy(
        new iam.PolicyStatement({
          actions: ["elasticache:ModifyReplicationGroup", "elasticache:DescribeReplicationGroups"],
          resources: [arnOf("replicationgroup", cache.replicationGroup.ref)],
        }),
      );
    }
    // each schedule lets Secrets Manager invoke the function and grants it that secret's rotation actions
    this.schedules = targets.map(({ secret }, i) =>
      secret.addRotationSchedule(`Rotation${i}`, {
        rotationLambda: this.function,
        automaticallyAfter: Duration.days(ROTATION_DAYS),
      }),
    );
  }
}
