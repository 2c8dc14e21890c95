// The parts a chaos run needs beside the Redis Cluster: the S3 emulator holding the policy (the source of
// truth), the QuotaSync function (or, for the check API scenarios, the whole check API) in a process of its
// own behind a fault proxy, and the operator's actions on rules, through the same code the CLI runs (`tollgate quotas set --redis`, `tollgate policy upload`).
import { type ChildProcess, fork } from "node:child_process";
import { CreateBucketCommand, type S3Client } from "@aws-sdk/client-s3";
import { buildApp as buildFauxqs } from "fauxqs";
import { createAwsClients } from "../../functions/adapters/aws-clients.ts";
import { createRedisCluster } from "../../functions/adapters/redis-cluster.ts";
import { publishPolicy } from "../../functions/app/operator-actions.ts";
import { publishQuotaRules, removeQuotaRule, setQuotaRule } from "../../functions/app/quota-actions.ts";
import type { QuotaRuleDocument } from "../../functions/core/shared/quota-rules.ts";
import { localTenant } from "../local/local-principals.ts";
import { type FaultProxy, startFaultProxy } from "./fault-proxy.ts";

const REGION = "us-east-1";
const BUCKET = "tollgate-chaos";
/** The tenant the instances act for: the local stack's principal's (they sign as it, or connect under its namespace). */
export const CHAOS_TENANT = "local";
const SYNC_SERVER = new URL("./check-api-main.ts", import.meta.url).pathname;
/** How often the QuotaSync function re-reads the policy (a removal reaches HTTP clients within it). */
const REFRESH_SECONDS = "1";

const EMPTY_POLICY = {
  version: "chaos",
  channels: ["push"],
  segments: [],
  default: { name: "rest", caps: {} },
  quotas: [] as QuotaRuleDocument[],
  // every instance acts as the local stack's principal: its tenant syncs the rules setRule grants it
  tenants: [localTenant([])],
};

export class ChaosStack {
  private s3!: S3Client;
  private stopAws: () => Promise<void> = async () => {};
  private awsEndpoint = "";
  private syncServer: ChildProcess | undefined;
  private syncUrl = "";
  private syncPort = 0;
  proxy!: FaultProxy;

  constructor(
    readonly redisNodes: string[],
    private readonly logFile?: number,
    /** The function's routes: the QuotaSync function's, or the whole check API's (the check API scenarios). */
    private readonly routes: "quota-sync" | "all" = "quota-sync",
  ) {}

  async start(): Promise<void> {
    process.env.AWS_ACCESS_KEY_ID ??= "local";
    process.env.AWS_SECRET_ACCESS_KEY ??= "local";
    const fauxqs = buildFauxqs({ logger: false, host: "127.0.0.1" });
    this.awsEndpoint = await fauxqs.listen({ port: 0, host: "127.0.0.1" });
    this.stopAws = () => fauxqs.close();
    this.s3 = createAwsClients({ region: REGION, endpoint: this.awsEndpoint }).s3;
    await this.s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
    await publishPolicy(this.s3, BUCKET, JSON.stringify(EMPTY_POLICY));
    await this.startSyncServer();
    this.proxy = await startFaultProxy(() => this.syncUrl);
  }

  async stop(): Promise<void> {
    await this.proxy?.stop();
    await this.killSyncServer();
    await this.stopAws();
  }

  /** The URL HTTP-transport instances sync with: the fault proxy in front of the QuotaSync function. */
  get quotaSyncUrl(): string {
    return this.proxy.url;
  }

  /** The check API's URL (routes "all"): the fault proxy in front of it. */
  get functionUrl(): string {
    return this.proxy.url;
  }

  /** Starts the QuotaSync function (on the port it had before, when restarted). */
  async startSyncServer(): Promise<void> {
    const child = fork(SYNC_SERVER, [String(this.syncPort)], {
      execArgv: ["--import", "tsx"],
      env: {
        ...process.env,
        REDIS_NODES: this.redisNodes.join(","),
        CONFIG_BUCKET: BUCKET,
        CHECK_API_ROUTES: this.routes,
        CAMPAIGN_REDELIVERY_SECONDS: "150",
        AWS_REGION: REGION,
        AWS_ENDPOINT_URL: this.awsEndpoint,
        REFRESH_SECONDS,
        POWERTOOLS_LOG_LEVEL: "ERROR",
        POWERTOOLS_METRICS_DISABLED: "true",
      },
      stdio: ["ignore", this.logFile ?? "ignore", this.logFile ?? "ignore", "ipc"],
    });
    this.syncServer = child;
    this.syncUrl = await new Promise<string>((resolve, reject) => {
      child.once("message", (message: { url: string }) => resolve(message.url));
      child.once("exit", (code) => reject(new Error(`the QuotaSync function exited (${code}) before serving`)));
    });
    this.syncPort = Number(new URL(this.syncUrl).port);
  }

  /** kill -9 of the QuotaSync function's process. */
  async killSyncServer(): Promise<void> {
    const child = this.syncServer;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGKILL");
    await exited;
  }

  /** `tollgate quotas set <rule> --redis`: the rule into the policy in S3, then written to Redis. */
  async setRule(rule: QuotaRuleDocument): Promise<void> {
    const { policy, modifiedAt } = await setQuotaRule(this.s3, BUCKET, rule, [CHAOS_TENANT]);
    await this.withCluster((cluster) => publishQuotaRules(cluster, "tg", policy, modifiedAt));
  }

  /** `tollgate quotas remove <rule> --redis`: the rule out of the policy in S3, then out of Redis. */
  async removeRule(name: string): Promise<void> {
    const { policy, modifiedAt } = await removeQuotaRule(this.s3, BUCKET, name);
    await this.withCluster((cluster) => publishQuotaRules(cluster, "tg", policy, modifiedAt));
  }

  private async withCluster<T>(run: (cluster: ReturnType<typeof createRedisCluster>) => Promise<T>): Promise<T> {
    const cluster = createRedisCluster({
      nodes: this.redisNodes.slice(0, 3).map((node) => {
        const [host, port] = node.split(":");
        return { host: host as string, port: Number(port) };
      }),
    });
    try {
      return await run(cluster);
    } finally {
      cluster.disconnect();
    }
  }
}
