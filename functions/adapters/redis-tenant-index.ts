// The tenant index (core/quotas/tenant-rules-publication.ts) in Redis: one hash under the deployment's
// namespace, tenant namespace -> the stamp of the policy that wrote its rules (keys.ts, quotaTenantIndexKey).
import type { Cluster } from "ioredis";
import { quotaTenantIndexKey } from "../../sdk/src/protocol/index.ts";
import type { TenantIndex } from "../core/quotas/tenant-rules-publication.ts";
import { redisCallsOf } from "./redis-cluster.ts";

export class RedisTenantIndex implements TenantIndex {
  private readonly key: string;

  constructor(
    private readonly cluster: Cluster,
    namespace: string,
    private readonly deadlineMs = 2_000,
  ) {
    this.key = quotaTenantIndexKey(namespace);
  }

  namespaces(): Promise<string[]> {
    return this.call(() => this.cluster.hkeys(this.key));
  }

  async add(tenantNamespace: string, stamp: number): Promise<void> {
    await this.call(() => this.cluster.hset(this.key, tenantNamespace, stamp));
  }

  async remove(tenantNamespace: string, stamp: number): Promise<void> {
    // a namespace a newer policy indexed again stays (two calls: a write between them can still lose its
    // entry, which leaves that tenant's rules to the next publication without it to remove)
    const stored = await this.call(() => this.cluster.hget(this.key, tenantNamespace));
    if (stored !== null && Number(stored) <= stamp) await this.call(() => this.cluster.hdel(this.key, tenantNamespace));
  }

  private call<T>(run: () => Promise<T>): Promise<T> {
    return redisCallsOf(this.cluster).call(`quota tenant index ${this.key}`, [this.key], run, {
      deadlineMs: this.deadlineMs,
      retryOn: "no-answer",
    });
  }
}
