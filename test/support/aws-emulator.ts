// The S3/SQS emulator (fauxqs) on loopback for the tests of one file or describe block: started before
// them, stopped after, with real @aws-sdk clients pointed at it.
import type { S3Client } from "@aws-sdk/client-s3";
import type { SQSClient } from "@aws-sdk/client-sqs";
import { type FauxqsServer, startFauxqs } from "fauxqs";
import { afterAll, beforeAll } from "vitest";
import { createAwsClients } from "../../functions/adapters/aws-clients.ts";

export interface AwsEmulator {
  endpoint: string;
  s3: S3Client;
  sqs: SQSClient;
}

/** Registers the start (beforeAll) and stop (afterAll); the fields are set once the start has run. */
export function useAwsEmulator(): AwsEmulator {
  const emulator = {} as AwsEmulator;
  let server: FauxqsServer;
  beforeAll(async () => {
    process.env.AWS_ACCESS_KEY_ID ??= "local";
    process.env.AWS_SECRET_ACCESS_KEY ??= "local";
    server = await startFauxqs({ port: 0, host: "127.0.0.1", logger: false });
    emulator.endpoint = `http://127.0.0.1:${server.port}`;
    Object.assign(emulator, createAwsClients({ region: "us-east-1", endpoint: emulator.endpoint }));
  });
  afterAll(async () => {
    await server.stop();
  });
  return emulator;
}
