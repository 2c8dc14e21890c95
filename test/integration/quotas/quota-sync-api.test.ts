// POST /v1/quotas/sync through the local Function URL server, the real handler and the real cluster: the
// strict request schema, the rule's slot groups, replays, and the rule published from the policy.

import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { RedisQuotaStore } from "../../../functions/adapters/redis-quota-store.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import type { SyncRequest } from "../../../sdk/src/protocol/index.ts";
import { slotGroupOf, tenantNamespace } from "../../../sdk/src/protocol/index.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { testStack, uploadRules } from "../../support/pipeline.ts";
import { signedFetch } from "../../support/signed-fetch.ts";

let stack: LocalStack;
let cluster: TollgateCluster;
const namespace = uniqueNamespace();
const quotaRules = [
  {
    name: "api",
    mode: "approximate",
    limits: [
      { window: "1s", max: 100 },
      { window: "5s", max: 300 },
    ],
  },
  { name: "search", mode: "strict", limits: [{ window: "1s", max: 10 }], slotGroups: 4 },
];
const policy = (version: string, quotas: unknown[]) => ({
  version,
  channels: ["push"],
  segments: [],
  default: { name: "rest", caps: {} },
  quotas,
});
beforeAll(async () => {
  cluster = connectCluster();
  // the policy is uploaded after the stack starts: no cached "no rules" from the warm-up
  stack = await testStack({ environment: { REFRESH_SECONDS: "0", KEY_NAMESPACE: namespace } });
  await uploadRules(stack, policy("quotas.1", quotaRules), {});
});
afterAll(async () => {
  await stack.stop();
  await cluster.quit();
});

type Refusal = { error: { message: string; path: string } };

const sync = (body: unknown) =>
  signedFetch(`${stack.endpoints.functionUrl}/v1/quotas/sync`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });

const request = (fields: Partial<SyncRequest> = {}): SyncRequest => ({
  instanceId: `i-${Date.now()}`,
  rule: "api",
  group: 0,
  seq: 1,
  configVersion: "",
  entries: [{ key: "tenant-1", usage: [[Date.now(), 30]], refunds: [], offered: 30, want: 0 }],
  ...fields,
});

describe("POST /v1/quotas/sync", () => {
  it("counts usage once, answers the allowance and the rule, and a replay as a duplicate", async () => {
    const body = request();
    const first = await sync(body);
    expect(first.status).toBe(200);
    const reply = (await first.json()) as { configVersion: string };
    expect(reply).toMatchObject({
      status: "applied",
      rule: {
        mode: "approximate",
        limits: [
          { windowMs: 1000, max: 100 },
          { windowMs: 5000, max: 300 },
        ],
      },
      instances: 1,
      // the 30 reported, and its allowance (70 left, capped at 2 × 30 offered + 1) reserved until its next sync
      entries: [{ key: "tenant-1", mode: "approximate", allowance: 61, used: [91, 91] }],
    });
    expect(reply.configVersion).toMatch(/^quotas\.1\./);
    const again = (await (await sync({ ...body, configVersion: reply.configVersion })).json()) as {
      rule?: unknown;
      entries: { used: number[] }[];
    };
    expect(again).toMatchObject({ status: "duplicate", entries: [{ allowance: 61 }] });
    // the replay counted nothing: the 5 s window still holds the 91. The 1 s window reads the server's
    // clock, so on a slow machine the first report may already have left it (never more than 91).
    const [oneSecond, fiveSeconds] = again.entries[0]?.used ?? [];
    expect(fiveSeconds).toBe(91);
    expect(oneSecond).toBeLessThanOrEqual(91);
    expect(again.rule).toBeUndefined();
  });

  it("grants strict tokens in the key's own slot group and refuses a key sent to another group", async () => {
    const key = "tenant-7";
    const group = slotGroupOf(key, 4);
    const entries = [{ key, usage: [], refunds: [], offered: 4, want: 4 }];
    const granted = (await (await sync(request({ rule: "search", group, entries }))).json()) as {
      configVersion: string;
    };
    expect(granted).toMatchObject({ status: "applied", entries: [{ mode: "strict", tokens: 4, used: [4] }] });
    // a client that holds the current definition and still sends a key to another group is refused
    const { configVersion } = granted;
    const wrong = await sync(request({ rule: "search", group: (group + 1) % 4, configVersion, entries, seq: 2 }));
    expect(wrong.status).toBe(400);
    expect(await wrong.json()).toMatchObject({ error: { code: "invalid_request", path: "entries[0].key" } });
  });

  it("answers stale with the rule to a client that grouped its keys by an older definition, and counts nothing", async () => {
    // a client that does not know the rule yet puts every key in group 0; the rule has 4 groups
    const keys = Array.from({ length: 8 }, (_, i) => `tenant-${100 + i}`);
    const entries = keys.map((key) => ({ key, usage: [], refunds: [], offered: 1, want: 1 }));
    const body = request({ rule: "search", group: 0, configVersion: "quotas.0.old", entries });
    const reply = await sync(body);
    expect(reply.status).toBe(200);
    expect(await reply.json()).toMatchObject({ status: "stale", rule: { slotGroups: 4 }, entries: [] });
    // nothing was granted: each key's own group grants it its full want from an empty window
    for (const key of keys.filter((key) => slotGroupOf(key, 4) !== 0)) {
      const own = request({
        rule: "search",
        group: slotGroupOf(key, 4),
        seq: 1,
        entries: [{ key, usage: [], refunds: [], offered: 1, want: 1 }],
      });
      expect(await (await sync(own)).json()).toMatchObject({ status: "applied", entries: [{ tokens: 1, used: [1] }] });
    }
  });

  it("refuses an unknown field and a malformed entry, naming the field", async () => {
    const extra = await sync({ ...request(), now: 5 });
    expect(extra.status).toBe(400);
    expect(((await extra.json()) as Refusal).error.message).toMatch(/now/);
    const bad = await sync(request({ entries: [{ key: "k", usage: [[1, -3]], refunds: [], offered: 0, want: 0 }] }));
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as Refusal).error.path).toBe("entries[0].usage[0][1]");
    // strict spend ages: one per usage pair
    const ages = await sync(
      request({ entries: [{ key: "k", usage: [[1, 3]], refunds: [], offered: 0, want: 0, spentAgo: [4, 5] }] }),
    );
    expect(ages.status).toBe(400);
    expect(((await ages.json()) as Refusal).error.path).toBe("entries[0].spentAgo");
  });

  it("refuses a key listed twice in one sync, naming the second entry, and counts nothing", async () => {
    const entry = {
      key: "tenant-twice",
      usage: [[Date.now(), 5]] as [number, number][],
      refunds: [],
      offered: 5,
      want: 0,
    };
    const twice = await sync(request({ entries: [entry, { ...entry, usage: [[Date.now(), 7]] }] }));
    expect(twice.status).toBe(400);
    expect(await twice.json()).toMatchObject({
      error: { path: "entries[1].key", message: expect.stringContaining("already listed as entries[0]") },
    });
    // the refused sync counted nothing: the key's windows hold only the allowance this sync reserves
    const once = (await (
      await sync(request({ instanceId: "i-once", entries: [{ ...entry, usage: [] as [number, number][] }] }))
    ).json()) as { status: string; entries: { allowance: number; used: number[] }[] };
    expect(once.status).toBe("applied");
    const [assigned] = once.entries;
    expect(assigned?.used).toEqual([assigned?.allowance, assigned?.allowance]);
  });

  it("is served at the quota-sync URL (the check API's quotas alias, what grantQuotaSync grants), which answers no other route but its health", async () => {
    const post = (path: string, body: unknown) =>
      signedFetch(`${stack.endpoints.quotaSyncUrl}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    const synced = await post("/v1/quotas/sync", request({ instanceId: `i-alias-${Date.now()}` }));
    expect(synced.status).toBe(200);
    expect(await synced.json()).toMatchObject({ status: "applied", entries: [{ key: "tenant-1" }] });
    // a grantee of this URL cannot spend a rate limit or a user's frequency caps
    const limit = { algorithm: "fixed-window", key: "k", max: 5, windowMs: 60_000 };
    for (const [path, body] of [
      ["/v1/limit", limit],
      ["/v1/limits", { scope: "s", limits: [limit] }],
      ["/v1/frequency", { userId: 1, channel: "push" }],
    ] as const) {
      const refused = await post(path, body);
      expect(refused.status).toBe(404);
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("not_found");
    }
    // its health is served there too (a probe of this URL alone sees whether its Redis answers)
    expect((await signedFetch(`${stack.endpoints.quotaSyncUrl}/v1/health`)).status).toBe(200);
    // the check API's own URL still serves every route
    expect((await signedFetch(`${stack.endpoints.functionUrl}/v1/health`)).status).not.toBe(404);
  });

  it("answers a request of no keys (quotas.ready() asking for a rule) with the rule's definition, and counts nothing", async () => {
    const reply = await (await sync(request({ rule: "search", entries: [] }))).json();
    expect(reply).toMatchObject({ status: "applied", rule: { mode: "strict", slotGroups: 4 }, entries: [] });
  });

  it("refuses a rule the policy does not have (no tenant syncs it) with 403, before anything is written", async () => {
    const response = await sync(request({ rule: "nope" }));
    expect(response.status).toBe(403);
    expect(await response.json()).toMatchObject({ error: { code: "operation_not_allowed" } });
  });

  it("a rule added to the policy reaches an instance that syncs directly to Redis once a container loads the policy, with no POST /v1/quotas/sync", async () => {
    // last in the file: the policy changes for every test after it
    await uploadRules(
      stack,
      policy("quotas.2", [...quotaRules, { name: "vpc", mode: "approximate", limits: [{ window: "1s", max: 40 }] }]),
      {},
    );
    // any request makes the container load the policy (REFRESH_SECONDS 0); health reads no quota rule
    expect(await (await signedFetch(`${stack.endpoints.functionUrl}/v1/health`)).json()).toMatchObject({
      policyVersion: "quotas.2",
    });
    // the local tenant's namespace, where the container writes the rules that tenant syncs
    const direct = new RedisQuotaStore(cluster, tenantNamespace(namespace, "local"));
    const body: SyncRequest = {
      instanceId: "in-vpc",
      rule: "vpc",
      group: 0,
      seq: 1,
      configVersion: "",
      entries: [{ key: "k", usage: [], refunds: [], offered: 1, want: 0 }],
    };
    // the write follows the activation without holding up the request that caused it
    await vi.waitFor(async () => {
      expect(await direct.sync(body, Date.now())).toMatchObject({
        status: "applied",
        rule: { limits: [{ windowMs: 1000, max: 40 }] },
      });
    });
  });
});
