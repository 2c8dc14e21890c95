// S3 and SQS clients with bounded timeouts. With an endpoint (the local emulator) S3 uses path-style URLs.
import { S3Client } from "@aws-sdk/client-s3";
import { SQSClient } from "@aws-sdk/client-sqs";

export interface AwsClientsConfig {
  region: string;
  /** Only for local emulators; on AWS the SDK finds the endpoints. */
  endpoint?: string;
}

export function createAwsClients(config: AwsClientsConfig): { s3: S3Client; sqs: SQSClient } {
  const common = {
    region: config.region,
    ...(config.endpoint ? { endpoint: config.endpoint } : {}),
    // a call never waits forever: the consumer has a time budget
    requestHandler: { connectionTimeout: 2_000, requestTimeout: 10_000 },
  };
  return { s3: new S3Client({ ...common, forcePathStyle: config.endpoint !== undefined }), sqs: new SQSClient(common) };
}
