// A VPC with isolated private subnets (no NAT), private routes to S3, SQS, Secrets Manager and (when tracing)
// X-Ray, flow logs, and the security groups that let only the Lambdas reach Redis. For client services run in
// the VPC (containers): the ECR and CloudWatch Logs endpoints, or client subnets behind a NAT gateway.
import type { RemovalPolicy } from "aws-cdk-lib";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as logs from "aws-cdk-lib/aws-logs";
import { Construct } from "constructs";

/**
 * What a client service run in the VPC gets: "none"; "endpoints" (ECR API, ECR Docker and CloudWatch Logs
 * interface endpoints: what a container pulls its image and ships its logs through); "nat" (public
 * subnets with one NAT gateway and private client subnets routed through it, the isolated ones unchanged).
 */
export type ClientNetwork = "none" | "endpoints" | "nat";

export class Network extends Construct {
  readonly vpc: ec2.Vpc;
  readonly lambdaSecurityGroup: ec2.SecurityGroup;
  readonly redisSecurityGroup: ec2.SecurityGroup;
  /** Where a client service in the VPC runs: the client subnets behind the NAT, else the isolated ones. */
  readonly clientSubnets: ec2.SubnetSelection;

  constructor(
    scope: Construct,
    id: string,
    props: {
      redisPort: number;
      availabilityZones: number;
      tracing: boolean;
      logRetentionDays: number;
      clientNetwork: ClientNetwork;
      removalPolicy: RemovalPolicy;
    },
  ) {
    super(scope, id);
    const nat = props.clientNetwork === "nat";
    this.vpc = new ec2.Vpc(this, "Vpc", {
      maxAzs: props.availabilityZones,
      natGateways: nat ? 1 : 0,
      // the isolated group first: groups added after it leave its CIDR blocks (and the cache's subnets) as they are
      subnetConfiguration: [
        { name: "private", subnetType: ec2.SubnetType.PRIVATE_ISOLATED, cidrMask: 22 },
        ...(nat
          ? [
              { name: "public", subnetType: ec2.SubnetType.PUBLIC, cidrMask: 24 },
              { name: "clients", subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, cidrMask: 22 },
            ]
          : []),
      ],
    });
    this.clientSubnets = { subnetType: nat ? ec2.SubnetType.PRIVATE_WITH_EGRESS : ec2.SubnetType.PRIVATE_ISOLATED };
    const flowLogs = new logs.LogGroup(this, "FlowLogs", {
      retention: props.logRetentionDays as logs.RetentionDays,
      removalPolicy: props.removalPolicy,
    });
    this.vpc.addFlowLog("FlowLog", {
      destination: ec2.FlowLogDestination.toCloudWatchLogs(flowLogs),
      trafficType: ec2.FlowLogTrafficType.ALL,
    });
    this.vpc.addGatewayEndpoint("S3", { service: ec2.GatewayVpcEndpointAwsService.S3 });
    // without a NAT, every AWS API the functions call needs an endpoint: SQS, the Redis secret, Firehose, and X-Ray
    // when tracing (active tracing sends segments from inside the VPC). Each costs per hour and per AZ.
    const services: [string, ec2.InterfaceVpcEndpointAwsService][] = [
      ["Sqs", ec2.InterfaceVpcEndpointAwsService.SQS],
      ["SecretsManager", ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER],
      // the decision archive's records
      ["Firehose", ec2.InterfaceVpcEndpointAwsService.KINESIS_FIREHOSE],
      // the cache passwords' rotation function changes the AUTH token and the users (infra/cache-rotation.ts)
      ["ElastiCache", ec2.InterfaceVpcEndpointAwsService.ELASTICACHE],
    ];
    if (props.tracing) services.push(["XRay", ec2.InterfaceVpcEndpointAwsService.XRAY]);
    if (props.clientNetwork === "endpoints")
      services.push(
        ["EcrApi", ec2.InterfaceVpcEndpointAwsService.ECR],
        ["EcrDocker", ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER],
        ["Logs", ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS],
      );
    for (const [id, service] of services) {
      this.vpc.addInterfaceEndpoint(id, {
        service,
        privateDnsEnabled: true,
        subnets: { subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
      });
    }
    this.lambdaSecurityGroup = new ec2.SecurityGroup(this, "Lambdas", {
      vpc: this.vpc,
      description: "Tollgate Lambdas",
      allowAllOutbound: true,
    });
    this.redisSecurityGroup = new ec2.SecurityGroup(this, "Redis", {
      vpc: this.vpc,
      description: "Tollgate Redis: only the Lambdas",
      allowAllOutbound: false,
    });
    this.redisSecurityGroup.addIngressRule(this.lambdaSecurityGroup, ec2.Port.tcp(props.redisPort), "Lambdas to Redis");
  }
}
