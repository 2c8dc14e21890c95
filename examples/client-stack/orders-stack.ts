// An example client service in a CDK app of its own, another repository's in practice: it never imports
// Tollgate's constructs, only the values the Tollgate stack publishes under /<name>/clients/ in SSM
// (infra/client-exports.ts), resolved by CloudFormation at deploy time. Two clients:
// - OrdersApi, a Lambda outside the VPC syncing Quotas over the QuotaSync URL (the managed quota sync policy);
// - OrdersWorker, a Fargate service in Tollgate's VPC calling Redis itself (the cache's security group, the
//   managed secret-read policy); its image and logs go through the VPC's ECR and Logs endpoints
//   (tollgate:clientNetwork=endpoints) or its NAT (nat).
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Duration, Fn, Stack, type StackProps, Token } from "aws-cdk-lib";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as ecr from "aws-cdk-lib/aws-ecr";
import * as ecs from "aws-cdk-lib/aws-ecs";
import * as iam from "aws-cdk-lib/aws-iam";
import * as lambda from "aws-cdk-lib/aws-lambda";
import * as nodejs from "aws-cdk-lib/aws-lambda-nodejs";
import * as logs from "aws-cdk-lib/aws-logs";
import * as ssm from "aws-cdk-lib/aws-ssm";
import type { Construct } from "constructs";

const here = dirname(fileURLToPath(import.meta.url));

export interface OrdersStackProps extends StackProps {
  /** The Tollgate deployment's `tollgate:name` (default "tollgate"): the parameters' prefix. */
  tollgateName?: string;
  /** How many subnets `client-subnet-ids` holds: the Tollgate stack's availability zones (default 2). */
  tollgateSubnets?: number;
}

export class OrdersStack extends Stack {
  readonly api: lambda.Function;
  readonly worker: ecs.FargateService;

  constructor(scope: Construct, id: string, props: OrdersStackProps = {}) {
    super(scope, id, props);
    const prefix = `/${props.tollgateName ?? "tollgate"}/clients`;
    const parameter = (name: string) => ssm.StringParameter.valueForStringParameter(this, `${prefix}/${name}`);

    // outside the VPC: quota sync over HTTPS, signed with the function's role
    this.api = new nodejs.NodejsFunction(this, "OrdersApi", {
      entry: join(here, "orders-handler.ts"),
      runtime: lambda.Runtime.NODEJS_24_X,
      architecture: lambda.Architecture.ARM_64,
      memorySize: 512,
      timeout: Duration.seconds(10),
      projectRoot: join(here, "../.."),
      depsLockFilePath: join(here, "../../package-lock.json"),
      bundling: { format: nodejs.OutputFormat.ESM, target: "node24" },
      logGroup: new logs.LogGroup(this, "OrdersApiLogs", { retention: logs.RetentionDays.ONE_MONTH }),
      environment: { QUOTA_SYNC_URL: parameter("quota-sync-url") },
    });
    this.api.role?.addManagedPolicy(
      iam.ManagedPolicy.fromManagedPolicyArn(this, "QuotaSyncPolicy", parameter("quota-sync-policy-arn")),
    );

    // inside Tollgate's VPC: Redis itself, TLS, the AUTH token read from the secret (re-read on an auth failure)
    const subnets = props.tollgateSubnets ?? 2;
    const vpc = ec2.Vpc.fromVpcAttributes(this, "TollgateVpc", {
      vpcId: parameter("vpc-id"),
      availabilityZones: Array.from({ length: subnets }, (_, i) => Fn.select(i, Fn.getAzs())),
      privateSubnetIds: Fn.split(",", parameter("client-subnet-ids"), subnets),
    });
    const cacheGroup = ec2.SecurityGroup.fromSecurityGroupId(
      this,
      "TollgateCache",
      parameter("cache-security-group-id"),
      {
        allowAllOutbound: false,
      },
    );
    const cluster = new ecs.Cluster(this, "Workers", { vpc, containerInsightsV2: ecs.ContainerInsights.ENABLED });
    const task = new ecs.FargateTaskDefinition(this, "WorkerTask", {
      cpu: 256,
      memoryLimitMiB: 512,
      runtimePlatform: { cpuArchitecture: ecs.CpuArchitecture.ARM64 },
    });
    task.addContainer("worker", {
      image: ecs.ContainerImage.fromEcrRepository(new ecr.Repository(this, "WorkerImages"), "latest"),
      logging: ecs.LogDrivers.awsLogs({ streamPrefix: "worker" }),
      // the secret's ARN, not its value: a rotated token is read again by the process, not frozen into the task
      environment: {
        REDIS_NODES: parameter("redis-configuration-endpoint"),
        REDIS_TLS: "true",
        REDIS_AUTH_SECRET_ARN: parameter("redis-auth-secret-arn"),
      },
    });
    task.taskRole.addManagedPolicy(
      iam.ManagedPolicy.fromManagedPolicyArn(this, "CacheClientPolicy", parameter("cache-client-policy-arn")),
    );
    this.worker = new ecs.FargateService(this, "Worker", {
      cluster,
      taskDefinition: task,
      desiredCount: 1,
      vpcSubnets: { subnets: vpc.privateSubnets },
    });
    // the cache's ingress rule lives here, in the client's stack: Tollgate's stack never depends on a client
    const port = Token.asNumber(parameter("redis-port"));
    this.worker.connections.allowTo(cacheGroup, ec2.Port.tcp(port), "Orders worker to Tollgate Redis");
  }
}
