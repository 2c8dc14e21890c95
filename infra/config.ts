// Everything a user may change, read from CDK context (cdk.json or `-c key=value`) with documented defaults.
import type { Node } from "constructs";

export interface TollgateConfig {
  /** Prefix of every resource name. */
  name: string;
  /** "valkey" (default) or "redis". */
  engine: "valkey" | "redis";
  engineVersion: string;
  cacheNodeType: string;
  shards: number;
  replicasPerShard: number;
  /** Non-default on purpose: only the Lambdas' security group may reach it anyway. */
  redisPort: number;
  /** Sends per delivery message. */
  deliveryBatchSize: number;
  consumerTimeoutSeconds: number;
  consumerMemoryMb: number;
  batchSize: number;
  batchingWindowSeconds: number;
  /** Also bounds the connections to Redis: each concurrent consumer holds one per node. */
  maxConcurrency: number;
  checkApiMemoryMb: number;
  checkApiReservedConcurrency: number;
  /** 0: none. */
  checkApiProvisionedConcurrency: number;
  logRetentionDays: number;
  /** "retain" (default) or "destroy" for the bucket, queues' data and the cache. */
  removalPolicy: "retain" | "destroy";
}

export const DEFAULTS: TollgateConfig = {
  name: "tollgate",
  engine: "valkey",
  engineVersion: "8.0",
  cacheNodeType: "cache.r7g.large",
  shards: 3,
  replicasPerShard: 1,
  redisPort: 6380,
  deliveryBatchSize: 100,
  consumerTimeoutSeconds: 60,
  consumerMemoryMb: 1024,
  batchSize: 10,
  batchingWindowSeconds: 0,
  maxConcurrency: 20,
  checkApiMemoryMb: 512,
  checkApiReservedConcurrency: 100,
  checkApiProvisionedConcurrency: 0,
  logRetentionDays: 30,
  removalPolicy: "retain",
};

/** Context values arrive as strings from the command line and as JSON values from cdk.json. */
export function readConfig(node: Node): TollgateConfig {
  const config: Record<string, unknown> = { ...DEFAULTS };
  for (const [key, fallback] of Object.entries(DEFAULTS)) {
    const value: unknown = node.tryGetContext(`tollgate:${key}`);
    if (value === undefined) continue;
    if (typeof fallback === "number") {
      const number = Number(value);
      if (!Number.isInteger(number) || number < 0)
        throw new Error(`context tollgate:${key}: expected a non-negative integer, got ${String(value)}`);
      config[key] = number;
    } else {
      config[key] = String(value);
    }
  }
  const result = config as unknown as TollgateConfig;
  if (result.engine !== "valkey" && result.engine !== "redis")
    throw new Error(`context tollgate:engine: expected "valkey" or "redis", got ${result.engine}`);
  if (result.removalPolicy !== "retain" && result.removalPolicy !== "destroy")
    throw new Error(`context tollgate:removalPolicy: expected "retain" or "destroy"`);
  if (result.shards < 1 || result.replicasPerShard < 1)
    throw new Error(
      "context tollgate:shards and tollgate:replicasPerShard: at least 1 each (Multi-AZ needs a replica)",
    );
  return result;
}
