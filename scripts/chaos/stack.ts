// The parts a chaos run needs beside the Redis Cluster: the S3 emulator holding the policy (the source of
// truth), the QuotaSync function (or, for the check API scenarios, the whole check API) in a process of its
// own behind a fault proxy, and the operator's actions on rules, through the same code the CLI runs (`tollgate quotas set --redis`, `tollgate policy upload`).
import { type ChildProcess, fork } from "node:child_process";
import { CreateBucketCommand, type S3Client } from "@aws-sdk/client-s3";
import { buildApp as buildFauxqs } from "fauxqs";
import { createAwsClients } from "../../functions/adapters/aws-clients.ts";
import { createRedisCluster } from "../../functions/adapters/redis-cluster.ts";
import { publishPolicy } from "../../functions/app/operator-actions.ts";
import {
  type PolicyWritten,
  publishQuotaRules,
  removeQuotaRule,
  revokeQuotaRule,
  setQuotaRule,
} from "../../functions/app/quota-actions.ts";
import { acknowledgeStoreLoss } from "../../functions/app/store-actions.ts";
import type { QuotaRuleDocument } from "../../functions/core/shared/quota-rules.ts";
import { LOCAL_SIGNING, localTenant } from "../local/local-principals.ts";
import { signRequest } from "../sign-request.ts";
import { type FaultProxy, startFaultProxy } from "./fault-proxy.ts";
import { CHAOS_NAMESPACE, CHAOS_TENANTS, tenantDocument } from "./tenants.ts";

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
  // the single-tenant scenarios act as the local stack's principal, the tenant ones as A and B: each tenant
  // syncs the rules setRule grants it
  tenants: [localTenant([]), ...CHAOS_TENANTS.map(tenantDocument)],
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

  /**
   * `tollgate quotas set <rule> --tenant ... --redis`: the rule into the policy in S3, granted to `tenants`,
   * then written to Redis in each one's namespace. Returns the policy version it wrote.
   */
  async setRule(rule: QuotaRuleDocument, tenants: readonly string[] = [CHAOS_TENANT]): Promise<string> {
    return this.published(await setQuotaRule(this.s3, BUCKET, rule, tenants));
  }

  /** `tollgate quotas remove <rule> --redis`: the rule out of the policy in S3, then out of Redis. */
  async removeRule(name: string): Promise<void> {
    await this.published(await removeQuotaRule(this.s3, BUCKET, name));
  }

  /** The rule no longer synced by `tenants` (the others keep it), then Redis written as `--redis` does. */
  async revokeRule(name: string, tenants: readonly string[]): Promise<void> {
    await this.published(await revokeQuotaRule(this.s3, BUCKET, name, tenants));
  }

  private async published({ policy, modifiedAt }: PolicyWritten): Promise<string> {
    await this.withCluster((cluster) => publishQuotaRules(cluster, CHAOS_NAMESPACE, policy, modifiedAt));
    return policy.version;
  }

  /**
   * The QuotaSync function's scheduled restore, now (deployed, it runs every minute): the rules the store
   * lost written again in every namespace that syncs them. Returns the rules it restored.
   */
  async restoreNow(): Promise<string[]> {
    const child = this.syncServer;
    if (!child || child.exitCode !== null) throw new Error("the QuotaSync function is not running");
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("the QuotaSync function did not restore within 10 s")), 10_000);
      const onMessage = (message: { type?: string; restored?: string[]; error?: string }) => {
        if (message.type !== "restored") return;
        clearTimeout(timer);
        child.off("message", onMessage);
        if (message.error) reject(new Error(message.error));
        else resolve(message.restored ?? []);
      };
      child.on("message", onMessage);
      child.send({ type: "restore" });
    });
  }

  /** `tollgate store acknowledge` for the deployment's keys (the CLI's own code): the lost slots count again. */
  async acknowledgeStoreLoss(): Promise<number[]> {
    return this.withCluster(async (cluster) => {
      const done = await acknowledgeStoreLoss(this.s3, BUCKET, cluster, CHAOS_NAMESPACE);
      return done.slotsWritten;
    });
  }

  /** The slots `GET /v1/health` of the check API reports lost (`store.lostSlots`), as an operator reads them. */
  async lostSlotsInHealth(): Promise<number[]> {
    const target = `${this.functionUrl}/v1/health`;
    const signed = await signRequest({ url: target, method: "GET", headers: {}, body: "" }, LOCAL_SIGNING);
    const response = await fetch(target, { headers: signed.headers, signal: AbortSignal.timeout(2000) });
    const body = (await response.json()) as { store?: { lostSlots?: { slot: number }[] } };
    return (body.store?.lostSlots ?? []).map((s) => s.slot);
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
