// A tenant taken out of the policy: when the next policy is published, its namespace's quota rules are gone
// from Redis, so neither transport hands it an allowance any more (over HTTP its principal is unknown; on
// the direct transport the store answers `norule`), while the tenant left in the policy keeps its rule.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { publishQuotaRules } from "../../../functions/app/quota-actions.ts";
import { parsePolicy } from "../../../functions/core/capping/policy.ts";
import type { TenantDocument } from "../../../functions/core/shared/tenants.ts";
import { LOCAL_REGION } from "../../../scripts/local/local-principals.ts";
import type { LocalCredential } from "../../../scripts/local/sigv4-verify.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { SyncRejectedError } from "../../../sdk/src/errors.ts";
import {
  quotaTenantIndexKey,
  type SyncReply,
  type SyncRequest,
  tenantNamespace,
} from "../../../sdk/src/protocol/index.ts";
import { httpTransport } from "../../../sdk/src/transports/http.ts";
import { redisTransport } from "../../../sdk/src/transports/redis.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { testStack, uploadRules } from "../../support/pipeline.ts";

const credential = (name: string): LocalCredential => ({
  accessKeyId: `AKID${name.toUpperCase()}`,
  secretAccessKey: `secret-of-${name}`,
  principalArn: `arn:aws:iam::111111111111:user/${name}`,
});
const A = credential("team-a");
const B = credential("team-b");
const tenant = (name: string, namespace: string, arn: string): TenantDocument => ({
  name,
  namespace,
  principals: [arn],
  operations: ["limit", "quota-sync"],
  quotaRules: ["api"],
});
const policy = (version: string, tenants: TenantDocument[]) => ({
  version,
  channels: ["push"],
  segments: [],
  default: { name: "rest", caps: {} },
  quotas: [{ name: "api", mode: "approximate", limits: [{ window: "1s", max: 100 }] }],
  tenants,
});
const both = policy("removal.1", [tenant("team-a", "a", A.principalArn), tenant("team-b", "b", B.principalArn)]);
const onlyB = policy("removal.2", [tenant("team-b", "b", B.principalArn)]);

let seq = 0;
const sync = (instanceId: string): SyncRequest => ({
  instanceId,
  rule: "api",
  group: 0,
  seq: ++seq,
  configVersion: "",
  entries: [{ key: "k", usage: [], refunds: [], offered: 10, want: 10 }],
});
/** What the reply hands the instance for key "k": nothing for a rule the store does not serve. */
const allowanceOf = (reply: SyncReply) => {
  const entry = reply.status === "norule" ? undefined : reply.entries[0];
  return entry?.mode === "approximate" ? entry.allowance : 0;
};

describe("a tenant taken out of the policy, through the check API's publication", () => {
  const namespace = uniqueNamespace();
  let stack: LocalStack;
  let cluster: TollgateCluster;
  const http = (as: LocalCredential) =>
    httpTransport({ url: stack.endpoints.functionUrl, signing: { region: LOCAL_REGION, credentials: as } });
  const direct = (tenantNs: string) => redisTransport({ redis: cluster, namespace, tenant: tenantNs });

  beforeAll(async () => {
    cluster = connectCluster();
    stack = await testStack({
      credentials: [A, B],
      environment: { KEY_NAMESPACE: namespace, REFRESH_SECONDS: "0" },
    });
    await uploadRules(stack, both, {});
  });
  afterAll(async () => {
    await stack.stop();
    await cluster.quit();
  });

  it("gets no allowance on either transport once the policy without it is published; the other tenant keeps its rule", async () => {
    expect(allowanceOf(await http(A).sync(sync("a-http"), Date.now()))).toBeGreaterThan(0);
    expect(allowanceOf(await direct("a").sync(sync("a-direct"), Date.now()))).toBeGreaterThan(0);
    expect(await cluster.hkeys(quotaTenantIndexKey(namespace))).toEqual(expect.arrayContaining(["a", "b"]));

    await uploadRules(stack, onlyB, {});
    // B's request loads the new policy (REFRESH_SECONDS 0), and loading it publishes the rules
    expect(allowanceOf(await http(B).sync(sync("b-http"), Date.now()))).toBeGreaterThan(0);
    const refused = http(A).sync(sync("a-http"), Date.now());
    await expect(refused).rejects.toBeInstanceOf(SyncRejectedError);
    await expect(refused).rejects.toThrow(/403.*unknown_principal/);
    // the publication runs as the policy is activated, beside the request that loaded it
    await expect.poll(async () => (await direct("a").sync(sync("a-direct"), Date.now())).status).toBe("norule");
    // what is left is the removal's tombstone (no rule), so a container still on the old policy cannot bring it back
    expect(await cluster.hget(`${tenantNamespace(namespace, "a")}:q:{api.0}:cfg`, "r")).toBe("");
    expect(await cluster.hkeys(quotaTenantIndexKey(namespace))).toEqual(["b"]);
    expect(allowanceOf(await direct("b").sync(sync("b-direct"), Date.now()))).toBeGreaterThan(0);
  });
});

describe("a tenant taken out of the policy, through the operator's publication (`quotas set --redis`)", () => {
  const namespace = uniqueNamespace();
  let cluster: TollgateCluster;
  beforeAll(() => {
    cluster = connectCluster();
  });
  afterAll(async () => {
    await cluster.quit();
  });

  it("removes every rule of the namespace the policy no longer names, and only those", async () => {
    await publishQuotaRules(cluster, namespace, parsePolicy(both), 1_000);
    const syncA = () => redisTransport({ redis: cluster, namespace, tenant: "a" }).sync(sync("a"), Date.now());
    expect(allowanceOf(await syncA())).toBeGreaterThan(0);
    const result = await publishQuotaRules(cluster, namespace, parsePolicy(onlyB), 2_000);
    expect(result.removed).toEqual(["a"]);
    expect((await syncA()).status).toBe("norule");
    const syncB = redisTransport({ redis: cluster, namespace, tenant: "b" }).sync(sync("b"), Date.now());
    expect(allowanceOf(await syncB)).toBeGreaterThan(0);
    // published again without it: nothing left to remove
    expect((await publishQuotaRules(cluster, namespace, parsePolicy(onlyB), 3_000)).removed).toEqual([]);
  });
});
