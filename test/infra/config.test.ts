// The settings checked at synth: each rule with a passing and a failing case, and the error naming the
// context key a user would change. Pure: builds the app in memory with bundling skipped.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { buildApp } from "../../infra/app.ts";
import { PROFILE_DEFAULTS, SCRIPTS_READING_STORE_TIME, type TollgateConfig } from "../../infra/config.ts";

const noBundling = { "aws:cdk:bundling-stacks": [] };
const configOf = (context: Record<string, unknown>): TollgateConfig =>
  buildApp({ ...noBundling, ...context }).stack.config;
const failure = (context: Record<string, unknown>): string => {
  try {
    configOf(context);
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error(`accepted ${JSON.stringify(context)}`);
};

describe("profiles", () => {
  it("dev by default: one small node in one AZ, no reservation, no tracing, deleted with the stack", () => {
    expect(configOf({})).toMatchObject({
      profile: "dev",
      cacheNodeType: "cache.t4g.micro",
      shards: 1,
      replicasPerShard: 0,
      multiAz: false,
      availabilityZones: 1,
      removalPolicy: "destroy",
      checkApiReservedConcurrency: undefined,
      tracing: false,
    });
  });

  it("prod: 3 shards with a replica each, Multi-AZ over 2 AZs, 100 reserved, traced, retained", () => {
    expect(configOf({ "tollgate:profile": "prod" })).toMatchObject({
      profile: "prod",
      cacheNodeType: "cache.r7g.large",
      shards: 3,
      replicasPerShard: 1,
      multiAz: true,
      availabilityZones: 2,
      removalPolicy: "retain",
      checkApiReservedConcurrency: 100,
      tracing: true,
    });
  });

  it("a context key overrides its profile default, from the command line (text) or cdk.json (JSON)", () => {
    expect(configOf({ "tollgate:profile": "prod", "tollgate:shards": "6" }).shards).toBe(6);
    expect(configOf({ "tollgate:profile": "prod", "tollgate:shards": 6 }).shards).toBe(6);
    expect(configOf({ "tollgate:tracing": "true" }).tracing).toBe(true);
    expect(configOf({ "tollgate:tracing": true, "tollgate:profile": "dev" }).tracing).toBe(true);
    expect(configOf({ "tollgate:profile": "prod", "tollgate:checkApiReservedConcurrency": "none" })).toMatchObject({
      checkApiReservedConcurrency: undefined,
    });
  });

  it("refuses serverless with the reasons: the scripts that read TIME and cap-sends' undeclared keys", () => {
    const message = failure({ "tollgate:profile": "serverless" });
    expect(message).toMatch(
      /^context tollgate:profile: serverless cannot run Tollgate: ElastiCache Serverless refuses TIME/,
    );
    for (const script of SCRIPTS_READING_STORE_TIME) expect(message).toContain(script);
    expect(message).toContain("cap-sends reads the user records and page blocks of its slot");
  });

  it("names exactly the scripts whose sources call TIME in the serverless refusal", () => {
    const calls = (file: string) => /\b(?:redis\.call|rcall)\(\s*['"]TIME['"]/.test(readFileSync(file, "utf8"));
    const lua = readdirSync("lua", { recursive: true, encoding: "utf8" })
      .filter((file) => file.endsWith(".lua"))
      .map((file) => join("lua", file));
    expect(lua.filter(calls).sort()).toEqual([...SCRIPTS_READING_STORE_TIME].sort());
  });

  it("refuses an unknown profile and an unknown (misspelt) setting, naming the key", () => {
    expect(failure({ "tollgate:profile": "staging" })).toMatch(/^context tollgate:profile: expected "dev" or "prod"/);
    expect(failure({ "tollgate:shard": 3 })).toMatch(/^context tollgate:shard: unknown setting \(known: name, /);
  });

  it("every profile default passes its own validation", () => {
    for (const profile of Object.keys(PROFILE_DEFAULTS))
      expect(configOf({ "tollgate:profile": profile }).profile).toBe(profile);
  });
});

describe("engine and version", () => {
  it("picks the engine's own default version", () => {
    expect(configOf({ "tollgate:engine": "redis" })).toMatchObject({
      engineVersion: "7.0",
      parameterGroupFamily: "redis7",
    });
    expect(configOf({})).toMatchObject({ engine: "valkey", engineVersion: "8.0", parameterGroupFamily: "valkey8" });
  });

  it("offers exactly the versions the suite runs on: Redis 7.0 and Valkey 8.0", () => {
    expect(failure({ "tollgate:engineVersion": "8.1" })).toMatch(/^context tollgate:engineVersion: valkey 8.1 .* 8.0$/);
    expect(failure({ "tollgate:engineVersion": "7.2" })).toMatch(/^context tollgate:engineVersion: valkey 7.2 .* 8.0$/);
    expect(failure({ "tollgate:engine": "redis", "tollgate:engineVersion": "7.1" })).toMatch(
      /^context tollgate:engineVersion: redis 7.1 .* 7.0$/,
    );
  });

  it("refuses a pair ElastiCache does not offer, naming tollgate:engineVersion", () => {
    expect(failure({ "tollgate:engine": "redis", "tollgate:engineVersion": "8.0" })).toMatch(
      /^context tollgate:engineVersion: redis 8.0 is not offered .* 7.0$/,
    );
    expect(failure({ "tollgate:engineVersion": "6.2" })).toMatch(/^context tollgate:engineVersion: valkey 6.2/);
    expect(failure({ "tollgate:engine": "memcached" })).toMatch(
      /^context tollgate:engine: expected "valkey" or "redis"/,
    );
  });
});

describe("durability", () => {
  const durable = {
    "tollgate:profile": "prod",
    "tollgate:durability": "sync",
    "tollgate:engineVersion": "9.0",
  };

  it("is off by default, and on Valkey 9.0 with a replica per shard on an R, M or C node type", () => {
    expect(configOf({}).durability).toBe("off");
    expect(configOf({ "tollgate:profile": "prod" }).durability).toBe("off");
    expect(configOf(durable)).toMatchObject({
      durability: "sync",
      engineVersion: "9.0",
      parameterGroupFamily: "valkey9",
    });
    expect(configOf({ ...durable, "tollgate:durability": "async" }).durability).toBe("async");
    expect(configOf({ ...durable, "tollgate:cacheNodeType": "cache.c7gn.large" }).durability).toBe("sync");
  });

  it("offers Valkey 9.0 only with durability, which needs it", () => {
    expect(failure({ "tollgate:engineVersion": "9.0" })).toMatch(
      /^context tollgate:engineVersion: valkey 9.0 is offered only with tollgate:durability/,
    );
    expect(failure({ "tollgate:profile": "prod", "tollgate:durability": "sync" })).toMatch(
      /^context tollgate:engineVersion: tollgate:durability = sync needs Valkey 9.0, got 8.0/,
    );
  });

  it("refuses what ElastiCache durability cannot run on, naming the key", () => {
    expect(failure({ ...durable, "tollgate:engine": "redis" })).toMatch(
      /^context tollgate:engine: redis has no durability/,
    );
    expect(failure({ ...durable, "tollgate:cacheNodeType": "cache.t4g.medium" })).toMatch(
      /^context tollgate:cacheNodeType: cache.t4g.medium cannot be durable/,
    );
    expect(failure({ ...durable, "tollgate:replicasPerShard": 0 })).toMatch(
      /^context tollgate:replicasPerShard: 0 cannot be durable .* at least 1 replica per shard/,
    );
    expect(failure({ ...durable, "tollgate:durability": "on" })).toMatch(
      /^context tollgate:durability: expected "off", "async" or "sync"/,
    );
  });
});

describe("concurrency", () => {
  it("refuses a reservation of 0, which would stop every call", () => {
    expect(failure({ "tollgate:checkApiReservedConcurrency": 0 })).toMatch(
      /^context tollgate:checkApiReservedConcurrency: expected "none" or an integer from 1/,
    );
    expect(configOf({ "tollgate:checkApiReservedConcurrency": 1 }).checkApiReservedConcurrency).toBe(1);
  });

  it("refuses a reservation the account's quota cannot give (Lambda keeps 100 unreserved)", () => {
    const quota10 = { "tollgate:profile": "prod", "tollgate:accountConcurrencyQuota": 10 };
    expect(failure(quota10)).toMatch(
      /^context tollgate:checkApiReservedConcurrency: 100 is more than the 0 an account with a concurrency quota of 10/,
    );
    expect(configOf({ ...quota10, "tollgate:checkApiReservedConcurrency": "none" }).checkApiReservedConcurrency).toBe(
      undefined,
    );
    const quota1000 = { "tollgate:accountConcurrencyQuota": 1000 };
    expect(configOf({ ...quota1000, "tollgate:checkApiReservedConcurrency": 900 }).checkApiReservedConcurrency).toBe(
      900,
    );
    expect(failure({ ...quota1000, "tollgate:checkApiReservedConcurrency": 901 })).toMatch(
      /^context tollgate:checkApiReservedConcurrency: 901 is more than the 900/,
    );
  });

  it("refuses more provisioned concurrency than is reserved", () => {
    const prod = { "tollgate:profile": "prod" };
    expect(configOf({ ...prod, "tollgate:checkApiProvisionedConcurrency": 100 }).checkApiProvisionedConcurrency).toBe(
      100,
    );
    expect(failure({ ...prod, "tollgate:checkApiProvisionedConcurrency": 101 })).toMatch(
      /^context tollgate:checkApiProvisionedConcurrency: 101 is more than the reserved concurrency/,
    );
  });
});

describe("sizes", () => {
  it("refuses sizes Lambda, SQS or ElastiCache cannot take, naming the key", () => {
    const cases: [string, unknown, RegExp][] = [
      ["consumerMemoryMb", 64, /from 128 to 10240/],
      ["checkApiMemoryMb", "lots", /from 128 to 10240/],
      ["consumerTimeoutSeconds", 901, /from 10 to 900/],
      ["maxConcurrency", 1, /from 2 to 1000/],
      ["shards", 0, /from 1 to 500/],
      ["replicasPerShard", 6, /from 0 to 5/],
      ["deliveryBatchSize", 1.5, /integer from 1 to 1000/],
      ["logRetentionDays", 31, /expected one of 1, 3, 5/],
      ["cacheNodeType", "cache.t2.micro", /current-generation node type/],
      ["removalPolicy", "keep", /"retain" or "destroy"/],
      ["tracing", "yes", /"true" or "false"/],
      ["architecture", "arm", /"arm64" or "x86_64"/],
      ["alarmEmail", "ops", /email address/],
    ];
    for (const [key, value, message] of cases) {
      const text = failure({ [`tollgate:${key}`]: value });
      expect(text, key).toMatch(new RegExp(`^context tollgate:${key}: `));
      expect(text, key).toMatch(message);
    }
  });

  it("refuses more than 10 messages a batch without a batching window", () => {
    expect(failure({ "tollgate:batchSize": 100 })).toMatch(
      /^context tollgate:batchSize: 100 needs tollgate:batchingWindowSeconds/,
    );
    expect(configOf({ "tollgate:batchSize": 100, "tollgate:batchingWindowSeconds": 1 }).batchSize).toBe(100);
  });

  it("refuses replicas with one AZ, and both alarm targets at once", () => {
    expect(failure({ "tollgate:replicasPerShard": 1 })).toMatch(
      /^context tollgate:availabilityZones: 1 cannot hold replicas/,
    );
    expect(configOf({ "tollgate:replicasPerShard": 1, "tollgate:availabilityZones": 2 }).multiAz).toBe(true);
    expect(
      failure({
        "tollgate:alarmEmail": "ops@example.com",
        "tollgate:alarmTopicArn": "arn:aws:sns:us-east-1:123456789012:ops",
      }),
    ).toMatch(/^context tollgate:alarmEmail: set either/);
  });
});
