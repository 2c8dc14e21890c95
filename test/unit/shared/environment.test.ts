// The functions' environments: defaults, and a message naming the variable for every missing or bad value.
import { describe, expect, it } from "vitest";
import { parseCheckApiEnvironment, parseConsumerEnvironment } from "../../../functions/app/environment.ts";
import { ValidationError } from "../../../functions/core/shared/errors.ts";

const minimal = {
  REDIS_NODES: "cfg.example.cache.amazonaws.com:6379",
  CONFIG_BUCKET: "tollgate-config",
  DELIVERY_QUEUE_URL: "https://sqs.eu-west-1.amazonaws.com/123456789012/tollgate-delivery",
  DEAD_LETTER_QUEUE_URL: "https://sqs.eu-west-1.amazonaws.com/123456789012/tollgate-campaign-dlq",
};

function errorFor(env: Record<string, string | undefined>): ValidationError {
  try {
    parseConsumerEnvironment(env);
  } catch (error) {
    expect(error).toBeInstanceOf(ValidationError);
    return error as ValidationError;
  }
  throw new Error("expected a ValidationError");
}

describe("consumer environment", () => {
  it("fills in the documented defaults", () => {
    expect(parseConsumerEnvironment(minimal)).toMatchObject({
      REDIS_NODES: [{ host: "cfg.example.cache.amazonaws.com", port: 6379 }],
      REDIS_TLS: false,
      REDIS_DEADLINE_MS: 6000,
      POLICY_KEY: "config/policy.json",
      DELIVERY_BATCH_SIZE: 100,
      REFRESH_SECONDS: 60,
      KEY_NAMESPACE: "tg",
      CAMPAIGN_REDELIVERY_SECONDS: 1800,
      CAP_HOT_RECORDS: "off",
      CAP_COMPACT_CLASSES: "off",
      TIME_BUDGET_MARGIN_MS: 15000,
      RECORDS_IN_FLIGHT: 10,
      AWS_REGION: "us-east-1",
    });
  });

  it("names each missing required variable", () => {
    for (const name of Object.keys(minimal)) {
      const env: Record<string, string | undefined> = { ...minimal, [name]: undefined };
      const error = errorFor(env);
      expect(error.path).toBe(name);
      expect(error.message).toMatch(new RegExp(`^${name}: required`));
    }
  });

  it("names each bad value", () => {
    const bad: [string, string][] = [
      ["REDIS_NODES", "redis://host"],
      ["REDIS_TLS", "yes"],
      ["REDIS_DEADLINE_MS", "fast"],
      ["DELIVERY_QUEUE_URL", "tollgate-delivery"],
      ["DEAD_LETTER_QUEUE_URL", "ftp://x"],
      ["DELIVERY_BATCH_SIZE", "0"],
      ["DELIVERY_BATCH_SIZE", "1001"],
      ["REFRESH_SECONDS", "-1"],
      ["CAMPAIGN_REDELIVERY_SECONDS", "1209601"],
      ["CAP_HOT_RECORDS", "true"],
      ["CAP_COMPACT_CLASSES", "yes"],
      ["KEY_NAMESPACE", "{tg}"],
      // 61 characters: no room left for `:t:` and a tenant namespace in a key's 64
      ["KEY_NAMESPACE", "n".repeat(61)],
      ["TIME_BUDGET_MARGIN_MS", "1.5"],
      ["RECORDS_IN_FLIGHT", "0"],
      ["RECORDS_IN_FLIGHT", "101"],
      ["AWS_ENDPOINT_URL", "localhost:4566"],
      ["CONFIG_BUCKET", ""],
    ];
    for (const [name, value] of bad) expect(errorFor({ ...minimal, [name]: value }).path).toBe(name);
  });

  it("takes a KEY_NAMESPACE with room for a tenant's `:t:<tenant>` (60 characters) and says why 61 is refused", () => {
    expect(parseConsumerEnvironment({ ...minimal, KEY_NAMESPACE: "n".repeat(60) }).KEY_NAMESPACE).toHaveLength(60);
    expect(errorFor({ ...minimal, KEY_NAMESPACE: "n".repeat(61) }).message).toMatch(
      /^KEY_NAMESPACE: at most 60 characters: a tenant's keys start with <KEY_NAMESPACE>:t:<tenant>/,
    );
  });

  it("reads several nodes, TLS and the local endpoint", () => {
    const env = parseConsumerEnvironment({
      ...minimal,
      REDIS_NODES: "127.0.0.1:7000, 127.0.0.1:7001",
      REDIS_TLS: "true",
      AWS_ENDPOINT_URL: "http://127.0.0.1:4566",
      DELIVERY_QUEUE_URL: "http://sqs.us-east-1.127.0.0.1:4566/000000000000/tollgate-delivery",
    });
    expect(env.REDIS_NODES).toEqual([
      { host: "127.0.0.1", port: 7000 },
      { host: "127.0.0.1", port: 7001 },
    ]);
    expect(env.REDIS_TLS).toBe(true);
  });
});

describe("check API environment", () => {
  const common = { REDIS_NODES: minimal.REDIS_NODES, CONFIG_BUCKET: minimal.CONFIG_BUCKET };
  it("serves every route unless told quota-sync (the QuotaSync function), and names a bad value", () => {
    expect(parseCheckApiEnvironment(common)).toMatchObject({
      CHECK_TIMEOUT_MS: 50,
      QUOTA_SYNC_TIMEOUT_MS: 250,
      NEGATIVE_CACHE: true,
      CHECK_API_ROUTES: "all",
    });
    expect(parseCheckApiEnvironment({ ...common, CHECK_API_ROUTES: "quota-sync" }).CHECK_API_ROUTES).toBe("quota-sync");
    for (const value of ["quotas", "", "QUOTA-SYNC"]) {
      expect(() => parseCheckApiEnvironment({ ...common, CHECK_API_ROUTES: value })).toThrow(
        /^CHECK_API_ROUTES: expected one of all, quota-sync/,
      );
    }
  });
});
