// Every setting a user may change: a profile (`dev` or `prod`) supplies the defaults, CDK context
// (`cdk.json` or `-c tollgate:<key>=<value>`) overrides them, and synth validates the result naming the key.
import type { Node } from "constructs";
import { z } from "zod";

export const PROFILES = ["dev", "prod"] as const;
export type Profile = (typeof PROFILES)[number];

/**
 * The engine versions ElastiCache offers that the suite runs on (npm test: Debian's Redis 7.0 and Valkey 8.0),
 * with their parameter group family: exactly those, no version the scripts were never run on.
 */
export const ENGINE_VERSIONS = {
  valkey: { "8.0": "valkey8" },
  redis: { "7.0": "redis7" },
} as const satisfies Record<string, Record<string, string>>;

/**
 * Valkey 9.0, offered only with `durability` (async or sync), which needs it: no Debian suite the tests install
 * from builds Valkey 9 yet, so the scripts have run on 8.0, not on 9.0 (docs/decisions/0080).
 */
export const DURABLE_ENGINE_VERSIONS = { valkey: { "9.0": "valkey9" } } as const;

/** The node type families ElastiCache durability runs on (of those the cacheNodeType pattern accepts). */
const DURABLE_NODE_FAMILIES = ["r6g", "r7g", "m6g", "m7g", "c7gn"];

/** CloudWatch Logs accepts only these retention periods. */
const LOG_RETENTION_DAYS = [
  1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653,
] as const;

/** Lambda keeps this much of the account's concurrency unreserved: a reservation may take only the rest. */
export const UNRESERVED_MINIMUM = 100;

// Context arrives as strings from `-c` and as JSON values from cdk.json: both are accepted.
const digits = z
  .string()
  .regex(/^-?[0-9]+$/)
  .transform(Number);
const integer = (min: number, max: number) => {
  const message = `expected an integer from ${min} to ${max}`;
  return z.union([z.number(), digits], message).pipe(z.int(message).min(min, message).max(max, message));
};
const boolean = z
  .union([z.boolean(), z.enum(["true", "false"])], 'expected "true" or "false"')
  .transform((value) => value === true || value === "true");
const reservedMessage = 'expected "none" or an integer from 1 (0 would stop every call)';
const reserved = z.union(
  [z.literal("none"), z.union([z.number(), digits]).pipe(z.int(reservedMessage).min(1, reservedMessage))],
  reservedMessage,
);

const settingsSchema = z
  .object({
    /** Prefix of the dashboard's name (and the stack's resources' tags). */
    name: z.string().regex(/^[a-z][a-z0-9-]{0,30}$/, "expected 1-31 characters a-z 0-9 -, starting with a letter"),
    /** Lambda architecture: the bundles are pure JavaScript and WebAssembly, so either loads. */
    architecture: z.enum(["arm64", "x86_64"], 'expected "arm64" or "x86_64"'),
    engine: z.enum(["valkey", "redis"], 'expected "valkey" or "redis"'),
    /** Defaults to the engine's default version (see ENGINE_VERSIONS). */
    engineVersion: z.string().optional(),
    cacheNodeType: z
      .string()
      .regex(
        /^cache\.(t3|t4g|m[5-7]g?|r[5-7]g?|r6gd|c7gn)\.[a-z0-9]+$/,
        "expected a current-generation node type, e.g. cache.t4g.micro or cache.r7g.large",
      ),
    shards: integer(1, 500),
    /**
     * "off": writes replicate asynchronously (a failover may lose the last ones); "async": a Multi-AZ
     * transaction log, at most 10 s of acknowledged writes lost; "sync": no acknowledged write lost, at
     * single-digit milliseconds per write. Valkey 9.0 only; set when the cluster is created.
     */
    durability: z.enum(["off", "async", "sync"], 'expected "off", "async" or "sync"'),
    /** 0: no replica (single AZ, no failover); 1 or more: Multi-AZ with automatic failover. */
    replicasPerShard: integer(0, 5),
    /** Availability zones of the VPC (and so of the cache's replicas). */
    availabilityZones: integer(1, 3),
    /** What a client service run in the VPC gets (infra/network.ts): "none", "endpoints" or "nat". */
    clientNetwork: z.enum(["none", "endpoints", "nat"], 'expected "none", "endpoints" or "nat"'),
    /** AWS accounts whose principals may be granted quota sync (comma-separated 12-digit IDs; none by default). */
    quotaSyncAccounts: z
      .string()
      .regex(/^$|^[0-9]{12}(,[0-9]{12})*$/, "expected comma-separated 12-digit AWS account IDs")
      .transform((text) => (text === "" ? [] : text.split(","))),
    /** Non-default on purpose: only the Lambdas' security group may reach it anyway. */
    redisPort: integer(1024, 65_535),
    /** Sends per delivery message. */
    deliveryBatchSize: integer(1, 1_000),
    consumerTimeoutSeconds: integer(10, 900),
    consumerMemoryMb: integer(128, 10_240),
    batchSize: integer(1, 10_000),
    batchingWindowSeconds: integer(0, 300),
    /** Also bounds the connections to Redis: each concurrent consumer holds one per node. */
    maxConcurrency: integer(2, 1_000),
    checkApiMemoryMb: integer(128, 10_240),
    /**
     * Where the check API runs: "lambda" (one invocation per execution environment) or "managed-instances"
     * (Lambda Managed Instances: a capacity provider's EC2 instances in the VPC, several invocations at once
     * per environment, whose checks of one hash slot share a script call: CHECK_SLOT_BATCH).
     */
    checkApiCompute: z.enum(["lambda", "managed-instances"], 'expected "lambda" or "managed-instances"'),
    /** With managed-instances: invocations at once per execution environment (PerExecutionEnvironmentMaxConcurrency). */
    checkApiEnvironmentConcurrency: integer(1, 1_600),
    /** With managed-instances: the capacity provider's most vCPUs (its instances' ceiling, and so its cost's). */
    checkApiMaxVCpus: integer(2, 15_000),
    /** "none" or how many concurrent executions are kept for the check API. */
    checkApiReservedConcurrency: reserved,
    /** 0: none. */
    checkApiProvisionedConcurrency: integer(0, 10_000),
    /** The account's Lambda concurrency quota (`aws lambda get-account-settings`), to check reservations at synth. */
    accountConcurrencyQuota: integer(10, 1_000_000),
    logRetentionDays: integer(1, 3653).refine((days) => (LOG_RETENTION_DAYS as readonly number[]).includes(days), {
      message: `expected one of ${LOG_RETENTION_DAYS.join(", ")}`,
    }),
    /** "retain" keeps the cache, bucket, queues and logs after `cdk destroy`; "destroy" deletes them. */
    removalPolicy: z.enum(["retain", "destroy"], 'expected "retain" or "destroy"'),
    /** X-Ray active tracing on both functions (and the X-Ray VPC endpoint it needs). */
    tracing: boolean,
    /** One EMF metrics document per check API request (decisions by algorithm on the dashboard). */
    checkApiMetrics: boolean,
    /** The CloudWatch namespace Quotas clients publish the SDK's metrics in (emfMetrics): the dashboard's Quotas row. */
    quotasMetricsNamespace: z
      .string()
      .regex(
        /^(?!AWS\/)[A-Za-z0-9._#:/-]{1,255}$/,
        "expected a CloudWatch namespace (1-255 of A-Z a-z 0-9 . - _ / # :, not AWS/)",
      ),
    /** Alarm notifications: a new SNS topic with this email subscribed (confirm the email AWS sends). */
    alarmEmail: z.email("expected an email address").optional(),
    /** Alarm notifications to an existing SNS topic. */
    alarmTopicArn: z
      .string()
      .regex(/^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]{1,256}$/, "expected an SNS topic ARN")
      .optional(),
    /**
     * The tenants (their policy `namespace`) with a Redis user of their own for the direct transport
     * (docs/tenants.md): a JSON array, or names separated by commas from `-c`. None: no user group.
     */
    cacheTenants: z
      .union([z.array(z.string()), z.string().transform((text) => text.split(",").filter(Boolean))])
      .pipe(z.array(z.string().regex(/^[a-z0-9][a-z0-9-]{0,31}$/, 'expected 1-32 characters a-z 0-9 "-"')).max(64)),
  })
  .strict();

type Settings = z.output<typeof settingsSchema>;
export type TollgateConfig = Omit<Settings, "engineVersion" | "checkApiReservedConcurrency"> & {
  profile: Profile;
  engineVersion: string;
  /** Parameter group family of the engine version. */
  parameterGroupFamily: string;
  /** undefined: no reservation. */
  checkApiReservedConcurrency: number | undefined;
  /** Replicas in other AZs with automatic failover. */
  multiAz: boolean;
};

type Defaults = Omit<z.input<typeof settingsSchema>, "engineVersion" | "alarmEmail" | "alarmTopicArn">;

const COMMON: Omit<
  Defaults,
  | "cacheNodeType"
  | "shards"
  | "replicasPerShard"
  | "availabilityZones"
  | "removalPolicy"
  | "checkApiReservedConcurrency"
  | "tracing"
  | "maxConcurrency"
> = {
  name: "tollgate",
  architecture: "arm64",
  engine: "valkey",
  durability: "off",
  clientNetwork: "none",
  quotaSyncAccounts: "",
  redisPort: 6380,
  deliveryBatchSize: 100,
  consumerTimeoutSeconds: 60,
  consumerMemoryMb: 1024,
  batchSize: 10,
  batchingWindowSeconds: 0,
  checkApiMemoryMb: 512,
  checkApiCompute: "lambda",
  checkApiEnvironmentConcurrency: 64,
  checkApiMaxVCpus: 16,
  checkApiProvisionedConcurrency: 0,
  accountConcurrencyQuota: 1_000,
  logRetentionDays: 30,
  checkApiMetrics: true,
  quotasMetricsNamespace: "Tollgate",
  cacheTenants: [],
};

/** The defaults of each profile; the README's "Deploy" section lists them and prices them. */
export const PROFILE_DEFAULTS: Record<Profile, Defaults> = {
  // small, one AZ, no reservation, deleted by `cdk destroy`: for trying Tollgate and for staging
  dev: {
    ...COMMON,
    cacheNodeType: "cache.t4g.micro",
    shards: 1,
    replicasPerShard: 0,
    availabilityZones: 1,
    removalPolicy: "destroy",
    checkApiReservedConcurrency: "none",
    tracing: false,
    maxConcurrency: 5,
  },
  // Multi-AZ, failover, kept after `cdk destroy`
  prod: {
    ...COMMON,
    cacheNodeType: "cache.r7g.large",
    shards: 3,
    replicasPerShard: 1,
    availabilityZones: 2,
    removalPolicy: "retain",
    checkApiReservedConcurrency: 100,
    tracing: true,
    maxConcurrency: 20,
  },
};

export const DEFAULT_PROFILE: Profile = "dev";

/**
 * The scripts that read the store's clock (`TIME`), which ElastiCache Serverless refuses inside a script:
 * `test/infra/config.test.ts` holds this list to the Lua sources.
 */
export const SCRIPTS_READING_STORE_TIME = [
  "lua/limit-common.lua",
  "lua/quota-rule.lua",
  "lua/quota-sync/store-now.lua",
];

/** Why `serverless` is not a profile: each ElastiCache Serverless rule Tollgate's scripts break. */
export const SERVERLESS_REFUSAL = [
  `ElastiCache Serverless refuses TIME inside scripts, and ${SCRIPTS_READING_STORE_TIME.join(", ")} read the store's clock with it so that no caller's clock decides a grant or a lifetime (decisions 0056, 0068, 0120)`,
  "it refuses keys a script does not declare, and cap-sends reads the user records and page blocks of its slot from the ranges it is given, declaring only its identity table (decision 0001)",
  "use dev or prod; docs/deploy.md says what a serverless store would need",
].join("; ");

/** Context keys read elsewhere (infra/app.ts), allowed beside the settings. */
const OTHER_KEYS = new Set(["profile", "stackName"]);

export class ConfigError extends Error {
  override name = "ConfigError";
  constructor(key: string, message: string) {
    super(`context tollgate:${key}: ${message}`);
  }
}

/** The settings of `node`'s context: profile defaults, then every `tollgate:*` key; throws ConfigError. */
export function readConfig(node: Node): TollgateConfig {
  const profileValue: unknown = node.tryGetContext("tollgate:profile") ?? DEFAULT_PROFILE;
  if (profileValue === "serverless")
    throw new ConfigError("profile", `serverless cannot run Tollgate: ${SERVERLESS_REFUSAL}`);
  const profile = PROFILES.find((name) => name === profileValue);
  if (!profile) throw new ConfigError("profile", `expected "dev" or "prod", got ${JSON.stringify(profileValue)}`);

  const overrides: Record<string, unknown> = {};
  for (const [contextKey, value] of Object.entries(node.getAllContext())) {
    if (!contextKey.startsWith("tollgate:")) continue;
    const key = contextKey.slice("tollgate:".length);
    if (OTHER_KEYS.has(key)) continue;
    if (!(key in settingsSchema.shape))
      throw new ConfigError(key, `unknown setting (known: ${Object.keys(settingsSchema.shape).join(", ")})`);
    overrides[key] = value;
  }
  const parsed = settingsSchema.safeParse({ ...PROFILE_DEFAULTS[profile], ...overrides });
  if (!parsed.success) {
    const issue = parsed.error.issues[0] as z.core.$ZodIssue;
    const key = String(issue.path[0]);
    throw new ConfigError(
      key,
      `${issue.message}, got ${JSON.stringify(overrides[key] ?? PROFILE_DEFAULTS[profile][key as keyof Defaults])}`,
    );
  }
  return finish(profile, parsed.data);
}

/** ElastiCache durability's requirements (Durability.Limitations in its guide), each naming the key to change. */
function checkDurable(settings: Settings, engineVersion: string): void {
  const asked = `tollgate:durability = ${settings.durability}`;
  if (settings.engine !== "valkey")
    throw new ConfigError(
      "engine",
      `${settings.engine} has no durability (${asked}); use valkey with engineVersion 9.0`,
    );
  if (!(engineVersion in DURABLE_ENGINE_VERSIONS.valkey))
    throw new ConfigError(
      "engineVersion",
      `${asked} needs Valkey 9.0, got ${engineVersion}: set tollgate:engineVersion=9.0 (outside the test matrix: the scripts have run on 8.0)`,
    );
  const family = settings.cacheNodeType.split(".")[1] ?? "";
  if (!DURABLE_NODE_FAMILIES.includes(family))
    throw new ConfigError(
      "cacheNodeType",
      `${settings.cacheNodeType} cannot be durable (${asked}); use a node type of ${DURABLE_NODE_FAMILIES.join(", ")}, e.g. cache.r7g.large`,
    );
  if (settings.replicasPerShard < 1)
    throw new ConfigError(
      "replicasPerShard",
      `0 cannot be durable (${asked}): durability needs Multi-AZ with at least 1 replica per shard`,
    );
}

/** The Node.js runtimes Lambda Managed Instances run (22 and later), as the functions declare theirs. */
export const MANAGED_INSTANCES_MIN_NODE = 22;

/** The smallest execution environment Lambda Managed Instances run: one vCPU at the least 2 GiB per vCPU. */
export const MANAGED_INSTANCES_MIN_MEMORY_MB = 2_048;

/**
 * What the check API on Lambda Managed Instances cannot be combined with, naming the key to change:
 * provisioned concurrency (a capacity provider keeps its own execution environments running), and less
 * memory than its smallest execution environment.
 */
function checkManagedInstances(settings: Settings): void {
  if (settings.checkApiMemoryMb < MANAGED_INSTANCES_MIN_MEMORY_MB)
    throw new ConfigError(
      "checkApiMemoryMb",
      `${settings.checkApiMemoryMb} is less than the ${MANAGED_INSTANCES_MIN_MEMORY_MB} MB of the smallest execution environment of tollgate:checkApiCompute = managed-instances (1 vCPU at 2 GiB per vCPU); use ${MANAGED_INSTANCES_MIN_MEMORY_MB} or more`,
    );
  if (settings.checkApiProvisionedConcurrency > 0)
    throw new ConfigError(
      "checkApiProvisionedConcurrency",
      `${settings.checkApiProvisionedConcurrency} cannot be combined with tollgate:checkApiCompute = managed-instances: provisioned concurrency is for Lambda's own execution environments, and a capacity provider keeps its environments running; use 0`,
    );
}

/** Refuses Lambda Managed Instances for a function runtime they do not run (Node.js before 22), naming the setting. */
export function checkManagedInstancesRuntime(runtime: string): void {
  const node = /^nodejs(\d+)\.x$/.exec(runtime);
  if (!node || Number(node[1]) < MANAGED_INSTANCES_MIN_NODE)
    throw new ConfigError(
      "checkApiCompute",
      `managed-instances runs Node.js ${MANAGED_INSTANCES_MIN_NODE} or later, and the functions declare ${runtime}; use lambda`,
    );
}

/** The rules that tie settings together, each naming the key a user would change. */
function finish(profile: Profile, settings: Settings): TollgateConfig {
  const durable = settings.durability !== "off";
  const versions: Record<string, string> = {
    ...ENGINE_VERSIONS[settings.engine],
    ...(durable && settings.engine === "valkey" ? DURABLE_ENGINE_VERSIONS.valkey : {}),
  };
  const engineVersion = settings.engineVersion ?? (settings.engine === "valkey" ? "8.0" : "7.0");
  const parameterGroupFamily = versions[engineVersion];
  if (durable) checkDurable(settings, engineVersion);
  if (!parameterGroupFamily && settings.engine === "valkey" && engineVersion in DURABLE_ENGINE_VERSIONS.valkey)
    throw new ConfigError(
      "engineVersion",
      `valkey ${engineVersion} is offered only with tollgate:durability (async or sync), which needs it: the suite runs on 8.0; use 8.0`,
    );
  if (!parameterGroupFamily)
    throw new ConfigError(
      "engineVersion",
      `${settings.engine} ${engineVersion} is not offered by ElastiCache or not tested here; use one of ${Object.keys(versions).join(", ")}`,
    );
  const checkApiReservedConcurrency =
    settings.checkApiReservedConcurrency === "none" ? undefined : settings.checkApiReservedConcurrency;
  const reservable = settings.accountConcurrencyQuota - UNRESERVED_MINIMUM;
  if (checkApiReservedConcurrency !== undefined && checkApiReservedConcurrency > reservable)
    throw new ConfigError(
      "checkApiReservedConcurrency",
      `${checkApiReservedConcurrency} is more than the ${Math.max(0, reservable)} an account with a concurrency quota of ${settings.accountConcurrencyQuota} (tollgate:accountConcurrencyQuota) can reserve, since Lambda keeps ${UNRESERVED_MINIMUM} unreserved; use "none" or ask AWS for a higher quota`,
    );
  const provisionedCeiling = checkApiReservedConcurrency ?? reservable;
  if (settings.checkApiProvisionedConcurrency > Math.max(0, provisionedCeiling))
    throw new ConfigError(
      "checkApiProvisionedConcurrency",
      `${settings.checkApiProvisionedConcurrency} is more than ${checkApiReservedConcurrency !== undefined ? `the reserved concurrency (tollgate:checkApiReservedConcurrency = ${checkApiReservedConcurrency})` : `the ${Math.max(0, reservable)} the account can reserve (tollgate:accountConcurrencyQuota)`}`,
    );
  if (settings.checkApiCompute === "managed-instances") checkManagedInstances(settings);
  if (settings.batchSize > 10 && settings.batchingWindowSeconds < 1)
    throw new ConfigError(
      "batchSize",
      `${settings.batchSize} needs tollgate:batchingWindowSeconds of at least 1 (SQS allows more than 10 per batch only with a batching window)`,
    );
  if (settings.replicasPerShard > 0 && settings.availabilityZones < 2)
    throw new ConfigError(
      "availabilityZones",
      `${settings.availabilityZones} cannot hold replicas in another AZ (tollgate:replicasPerShard = ${settings.replicasPerShard}); use 2 or 3, or 0 replicas`,
    );
  if (settings.alarmEmail !== undefined && settings.alarmTopicArn !== undefined)
    throw new ConfigError(
      "alarmEmail",
      "set either tollgate:alarmEmail (a new topic) or tollgate:alarmTopicArn, not both",
    );
  return {
    ...settings,
    profile,
    engineVersion,
    parameterGroupFamily,
    checkApiReservedConcurrency,
    multiAz: settings.replicasPerShard > 0,
  };
}
