// Tenants over the real path: requests signed with SigV4 by each tenant's key, checked by the local Function
// URL server, authorized by the handler, run against the real cluster. Whatever key, scope or rule name a
// tenant sends, it reaches its own namespace only: another tenant's state is never read, charged or reset
// (compared byte for byte in Redis), and an unknown principal changes nothing.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import type { LocalCredential } from "../../../scripts/local/sigv4-verify.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { signRequest } from "../../../scripts/sign-request.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { testStack, uploadRules } from "../../support/pipeline.ts";
import { signedFetch } from "../../support/signed-fetch.ts";

const key = (name: string, arn: string): LocalCredential => ({
  accessKeyId: `AKID${name.toUpperCase()}`,
  secretAccessKey: `secret-of-${name}`,
  principalArn: arn,
});
const A = key("a", "arn:aws:sts::111111111111:assumed-role/team-a/worker-1");
const B = key("b", "arn:aws:iam::222222222222:role/marketing");
const PEEK = key("peek", "arn:aws:iam::111111111111:user/dashboard");
const STRANGER = key("stranger", "arn:aws:iam::333333333333:user/stranger");

const namespace = uniqueNamespace();
const policy = {
  version: "tenants.1",
  channels: ["push"],
  segments: [],
  default: { name: "rest", caps: { push: [{ window: "1d", max: 1 }] } },
  quotas: [
    { name: "api", mode: "approximate", limits: [{ window: "1s", max: 100 }] },
    { name: "search", mode: "approximate", limits: [{ window: "1s", max: 10 }] },
  ],
  tenants: [
    {
      name: "team-a",
      namespace: "a",
      principals: ["arn:aws:sts::111111111111:assumed-role/team-a/*"],
      operations: ["limit", "limits", "quota-sync"],
      quotaRules: ["api"],
    },
    {
      name: "marketing",
      namespace: "b",
      principals: ["arn:aws:iam::222222222222:role/marketing"],
      operations: ["limit", "limits", "frequency-check", "frequency-consume", "quota-sync"],
      quotaRules: ["api", "search"],
    },
    {
      name: "dashboard",
      namespace: "peek",
      principals: ["arn:aws:iam::111111111111:user/dashboard"],
      operations: ["limit"],
      peekOnly: true,
    },
  ],
};

let stack: LocalStack;
let cluster: TollgateCluster;
beforeAll(async () => {
  cluster = connectCluster();
  stack = await testStack({
    credentials: [A, B, PEEK, STRANGER],
    environment: { KEY_NAMESPACE: namespace, REFRESH_SECONDS: "0" },
  });
  await uploadRules(stack, policy, {});
});
afterAll(async () => {
  await stack.stop();
  await cluster.quit();
});

const call = (as: LocalCredential, path: string, body: unknown) =>
  signedFetch(`${stack.endpoints.functionUrl}${path}`, { body: JSON.stringify(body) }, as);

/**
 * Every key of the test's namespace on the cluster, with its dumped value; not the quota rules' `:cfg`
 * keys nor the indexes of their names and tenants (`:q:rules`, `:q:tenants`), which every container of the service writes for each tenant
 * when it loads the policy (REFRESH_SECONDS 0 here: on every request), whoever calls.
 */
async function snapshot(prefix = `${namespace}:`): Promise<Map<string, string>> {
  const found = new Map<string, string>();
  for (const node of cluster.nodes("master")) {
    let cursor = "0";
    do {
      const [next, keys] = await node.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 1000);
      cursor = next;
      // the store epoch's keys are the deployment's, one per hash slot, written once (no tenant's state)
      const written = (name: string) =>
        [":cfg", ":q:rules", ":q:tenants"].some((end) => name.endsWith(end)) || name.startsWith(`${namespace}:se:{`);
      for (const name of keys.filter((name) => !written(name)))
        found.set(name, ((await node.dumpBuffer(name)) ?? Buffer.alloc(0)).toString("hex"));
    } while (cursor !== "0");
  }
  return found;
}

/** A snapshot with each key's remaining lifetime in ms (-1: none) and when it was taken. */
async function timedSnapshot() {
  const takenAt = Date.now();
  const keys = await snapshot();
  const lifetimes = new Map<string, number>();
  for (const name of keys.keys()) lifetimes.set(name, await cluster.pttl(name));
  return { takenAt, keys, lifetimes };
}

/** Nothing was written or changed since `before`; a key may only be missing if its lifetime has run out. */
async function expectUnchangedSince(before: Awaited<ReturnType<typeof timedSnapshot>>): Promise<void> {
  const after = await snapshot();
  const elapsed = Date.now() - before.takenAt;
  for (const name of after.keys()) expect(before.keys.has(name), `${name} was written`).toBe(true);
  for (const [name, dump] of before.keys) {
    if (after.has(name)) expect(after.get(name), name).toBe(dump);
    else {
      const lifetime = before.lifetimes.get(name) ?? -1;
      expect(lifetime >= 0 && lifetime <= elapsed, `${name} vanished with ${lifetime} ms to live`).toBe(true);
    }
  }
}

const limit = (name: string, extra: object = {}) => ({
  key: name,
  algorithm: "fixed-window",
  max: 1,
  windowMs: 3_600_000,
  ...extra,
});

/** Names that try to reach tenant A's key "k" or its namespace from another tenant's request. */
const hostileNames = (target: string) => [
  target,
  `{${target}}`,
  `}${target}{`,
  `%7B${target}%7D`,
  `a:${target}`,
  `t:a:rl:{${target}}`,
  `${namespace}:t:a:rl:{${target}}:fixed-window`,
  `}:fixed-window\n${namespace}:t:a:rl:{${target}`,
  `../a/${target}`,
  "\ud800",
];

describe("POST /v1/limit and /v1/limits across tenants", () => {
  it("tenant B reads, charges and resets nothing of tenant A's, whatever key it names", async () => {
    expect((await (await call(A, "/v1/limit", limit("k"))).json()) as object).toMatchObject({ allowed: true });
    expect((await (await call(A, "/v1/limit", limit("k"))).json()) as object).toMatchObject({ allowed: false });
    const ofA = await snapshot(`${namespace}:t:a:`);
    expect(ofA.size).toBeGreaterThan(0);
    for (const name of hostileNames("k")) {
      const response = await call(B, "/v1/limit", limit(name));
      // every name is B's own fresh key: allowed, never A's exhausted one
      expect(response.status, JSON.stringify(name)).toBe(200);
      expect(await response.json(), JSON.stringify(name)).toMatchObject({ allowed: true, remaining: 0 });
      const scoped = await call(B, "/v1/limits", { scope: name, limits: [limit(name)] });
      expect(await scoped.json(), JSON.stringify(name)).toMatchObject({ allowed: true });
    }
    expect(await snapshot(`${namespace}:t:a:`)).toEqual(ofA);
    // and A's own key is still exhausted: nothing B did reset it
    expect((await (await call(A, "/v1/limit", limit("k"))).json()) as object).toMatchObject({ allowed: false });
    for (const name of (await snapshot()).keys()) expect(name).toMatch(new RegExp(`^${namespace}:t:(a|b):`));
  });

  it("a denial cached for tenant A is never answered to tenant B", async () => {
    const hot = limit(`hot-${Date.now()}`);
    await call(A, "/v1/limit", hot);
    expect(await (await call(A, "/v1/limit", hot)).json()).toMatchObject({ allowed: false });
    expect(await (await call(B, "/v1/limit", hot)).json()).toMatchObject({ allowed: true });
  });
});

const syncBody = (rule: string, entryKey: string, used: number, instanceId = "instance-1", seq = 1) => ({
  instanceId,
  rule,
  group: 0,
  seq,
  configVersion: "",
  entries: [{ key: entryKey, usage: [[Date.now(), used]], refunds: [], offered: used, want: 0 }],
});

describe("POST /v1/quotas/sync across tenants", () => {
  it("tenant B's sync of the same rule and key counts in B's namespace alone, and A's usage stays A's", async () => {
    const first = await call(A, "/v1/quotas/sync", syncBody("api", "user-1", 60));
    expect(first.status).toBe(200);
    const ofA = await snapshot(`${namespace}:t:a:q:`);
    // what a key no one ever used answers B (its own reservation only)
    const fresh = (await (await call(B, "/v1/quotas/sync", syncBody("api", "never-used", 0, "instance-0"))).json()) as {
      entries: { used: number[] }[];
    };
    const names = ["user-1", "{api.0}:k:user-1", `${namespace}:t:a:q:{api.0}:k:user-1`, "}user-1", "%7Bapi.0%7D"];
    for (const [i, name] of names.entries()) {
      // the same instance id as A's: still another instance, in another namespace
      const reply = await call(B, "/v1/quotas/sync", syncBody("api", name, 0, "instance-1", i + 1));
      expect(reply.status, name).toBe(200);
      // B's instance is alone in B's namespace (A's instance-1 is not counted), its key fresh: none of A's 60
      const answer = (await reply.json()) as { status: string; instances: number; entries: { used: number[] }[] };
      expect(answer, name).toMatchObject({ status: "applied", instances: 2 });
      expect(answer.entries[0]?.used, name).toEqual(fresh.entries[0]?.used);
    }
    expect(await snapshot(`${namespace}:t:a:q:`)).toEqual(ofA);
  });

  it("a rule the tenant does not sync is refused 403 before anything is written", async () => {
    const before = await timedSnapshot();
    const refused = await call(A, "/v1/quotas/sync", syncBody("search", "user-1", 1));
    expect(refused.status).toBe(403);
    expect(await refused.json()).toMatchObject({ error: { code: "operation_not_allowed" } });
    const quotaUrl = await signedFetch(
      `${stack.endpoints.quotaSyncUrl}/v1/quotas/sync`,
      { body: JSON.stringify(syncBody("search", "user-1", 1)) },
      A,
    );
    expect(quotaUrl.status).toBe(403);
    await expectUnchangedSince(before);
  });
});

describe("POST /v1/frequency", () => {
  it("belongs to the marketing tenant: another tenant is refused 403 and no user record changes", async () => {
    const before = await timedSnapshot();
    for (const consume of [false, true]) {
      const response = await call(A, "/v1/frequency", { userId: 7, channel: "push", consume });
      expect(response.status).toBe(403);
      expect(await response.json()).toMatchObject({ error: { code: "operation_not_allowed" } });
    }
    await expectUnchangedSince(before);
    const marketing = await call(B, "/v1/frequency", { userId: 7, channel: "push", consume: true });
    expect(await marketing.json()).toMatchObject({ allowed: true });
  });
});

describe("principals without a tenant, and signatures", () => {
  // a quota key's lifetime ran out between the two snapshots on a loaded host: a missing key is judged by its TTL
  it("an unknown principal gets 403 unknown_principal on every route, and nothing changes", async () => {
    const before = await timedSnapshot();
    const bodies: [string, unknown][] = [
      ["/v1/limit", limit("k")],
      ["/v1/limits", { scope: "s", limits: [limit("k")] }],
      ["/v1/frequency", { userId: 7, channel: "push", consume: true }],
      ["/v1/quotas/sync", syncBody("api", "user-1", 5)],
    ];
    for (const [path, body] of bodies) {
      const response = await call(STRANGER, path, body);
      expect(response.status, path).toBe(403);
      expect(await response.json(), path).toMatchObject({ error: { code: "unknown_principal" } });
    }
    await expectUnchangedSince(before);
  });

  it("an unsigned request, one signed by an unknown key and one whose body is not the signed one get AWS's 403", async () => {
    const url = `${stack.endpoints.functionUrl}/v1/limit`;
    const body = JSON.stringify(limit("k"));
    const unsigned = await fetch(url, { method: "POST", body });
    expect(unsigned.status).toBe(403);
    expect(await unsigned.json()).toEqual({ Message: "Forbidden" });
    const forged = await signedFetch(url, { body }, { ...A, accessKeyId: "AKIDFORGED" });
    expect(forged.status).toBe(403);
    const signed = await signRequest(
      { url, method: "POST", headers: { "content-type": "application/json" }, body },
      { region: "us-east-1", credentials: B },
    );
    const swapped = await fetch(url, { method: "POST", headers: signed.headers, body: body.replace('"k"', '"j"') });
    expect(swapped.status).toBe(403);
    const wrongSecret = await signedFetch(url, { body }, { ...B, secretAccessKey: "guessed" });
    expect(wrongSecret.status).toBe(403);
  });

  it("a peek-only tenant may ask with cost 0 and is refused a charge", async () => {
    const peek = await call(PEEK, "/v1/limit", limit("k", { cost: 0 }));
    expect(peek.status).toBe(200);
    const charge = await call(PEEK, "/v1/limit", limit("k"));
    expect(charge.status).toBe(403);
    expect(await charge.json()).toMatchObject({ error: { code: "operation_not_allowed" } });
  });
});
