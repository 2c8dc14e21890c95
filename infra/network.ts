// A VPC with isolated private subnets (no NAT), private routes to S3, SQS, Secrets Manager and (when tracing)
// X-Ray, flow logs, and the security groups that let only the Lambdas reach Redis.
import type { RemovalPolicy } from "aws-cdk-lib";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as logs from "aws-cdk-lib/aws-logs";
import { Construct } from "constructs";

export class Network extends Construct {
  readonly vpc: ec2.Vpc;
  readonly lambdaSecurityGroup: ec2.SecurityGroup;
  readonly redisSecurityGroup: ec2.SecurityGroup;

  constructor(
    scope: Construct,
    id: string,
    props: {
      redisPort: number;
      availabilityZones: number;
      tracing: boolean;
      logRetentionDays: number;
      removalPolicy: RemovalPolicy;
    },
  ) {
    super(scope, id);
    this.vpc = new ec2.Vpc(this, "Vpc", {
      maxAzs: props.availabilityZones,
      natGateways: 0,
      subnetConfiguration: [{ name: "private", subnetType: ec2.SubnetType.PRIVATE_ISOLATED, cidrMask: 22 }],
    });
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
    ];
    if (props.tracing) services.push(["XRay", ec2.InterfaceVpcEndpointAwsService.XRAY]);
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
