// POST /v1/quotas/sync on the local stack: replayed, reordered and concurrent syncs, `tollgate quotas set` and
// `usage`, and SDK instances syncing over HTTP.

import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { runCli } from "../../../scripts/cli.ts";
import { LOCAL_SIGNING } from "../../../scripts/local/local-principals.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import {
  type ApproximateAssignment,
  MAX_KEY_LENGTH,
  MAX_KEYS_PER_SYNC,
  type SyncReply,
  type SyncRequest,
  slotGroupOf,
} from "../../../sdk/src/protocol/index.ts";
import { createQuotas } from "../../../sdk/src/quotas.ts";
import { httpTransport } from "../../../sdk/src/transports/http.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { testStack, uploadRules } from "../../support/pipeline.ts";
import { signedFetch } from "../../support/signed-fetch.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

// "tight" (strict) and "wide" (approximate, 1 s and 5 s windows), the latter's max given
const quotasPolicy = (version: string, wideMax: number) => ({
  version,
  channels: ["push"],
  segments: [],
  default: { name: "rest", caps: {} },
  quotas: [
    { name: "tight", mode: "strict", limits: [{ window: "1s", max: 10 }], leaseMs: 100, slotGroups: 2 },
    {
      name: "wide",
      mode: "approximate",
      limits: [
        { window: "1s", max: wideMax },
        { window: "5s", max: 2 * wideMax },
      ],
      slotGroups: 2,
    },
  ],
});

const quotasNamespace = uniqueNamespace();

describe("review: POST /v1/quotas/sync, replayed, reordered and concurrent syncs (issue 12)", () => {
  let stack: LocalStack;
  beforeAll(async () => {
    stack = await testStack({ environment: { REFRESH_SECONDS: "0", KEY_NAMESPACE: quotasNamespace } });
    await uploadRules(stack, quotasPolicy("review.quotas.1", 60), {});
  });
  afterAll(async () => {
    await stack.stop();
  });
  const sync = async (body: SyncRequest): Promise<SyncReply> => {
    const response = await signedFetch(`${stack.endpoints.functionUrl}/v1/quotas/sync`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    expect(response.status).toBe(200);
    return (await response.json()) as SyncReply;
  };

  it("never grants more than max tokens in any window of W + lease, however syncs are replayed, reordered or concurrent", async () => {
    const key = `fresh-${Date.now()}`;
    const group = slotGroupOf(key, 2);
    const want = (instanceId: string, seq: number): SyncRequest => ({
      instanceId,
      rule: "tight",
      group,
      seq,
      configVersion: "",
      entries: [{ key, usage: [], refunds: [], offered: 10, want: 10 }],
    });
    const instances = ["r2-a", "r2-b", "r2-c", "r2-d"].map((id) => `${id}-${Date.now()}`);
    const replies: SyncReply[] = [];
    // each instance: seq 1, seq 1 replayed twice at once, then seq 3 before seq 2; all instances concurrently
    await Promise.all(
      instances.map(async (id) => {
        replies.push(await sync(want(id, 1)));
        replies.push(...(await Promise.all([sync(want(id, 1)), sync(want(id, 1))])));
        replies.push(await sync(want(id, 3)), await sync(want(id, 2)));
      }),
    );
    const statuses = new Set(replies.map((reply) => reply.status));
    expect(statuses.has("applied") && statuses.has("duplicate")).toBe(true);
    const grants = replies.flatMap((reply) =>
      reply.entries.map((entry) => ({ t: reply.serverTime, tokens: entry.mode === "strict" ? entry.tokens : 0 })),
    );
    for (const reply of replies)
      if (reply.status === "duplicate")
        expect(reply.entries.every((e) => e.mode === "strict" && e.tokens === 0)).toBe(true);
    // the fresh key got its tokens, and no window of W + lease holds more than max granted
    expect(grants.reduce((sum, g) => sum + g.tokens, 0)).toBeGreaterThan(0);
    for (const { t } of grants) {
      const inWindow = grants.filter((g) => g.t >= t && g.t < t + 1_100).reduce((sum, g) => sum + g.tokens, 0);
      expect(inWindow).toBeLessThanOrEqual(10);
    }
  });

  it("tollgate quotas set refuses malformed numbers (1s=50=7, 1s=0x20, --lease-ms 1e2, --lease-ms '', --slot-groups 2.0) and uploads nothing (review3 defect, fixed)", async () => {
    const target = ["--endpoint", stack.endpoints.awsEndpoint, "--bucket", stack.endpoints.bucket];
    const run = async (argv: string[]) => {
      const lines: string[] = [];
      const log = vi.spyOn(console, "log").mockImplementation((line: string) => void lines.push(line));
      const error = vi.spyOn(console, "error").mockImplementation((line: string) => void lines.push(String(line)));
      try {
        return { code: await runCli(argv), text: lines.join("\n") };
      } finally {
        log.mockRestore();
        error.mockRestore();
      }
    };
    for (const odd of [
      ["--limit", "1s=50=7"],
      ["--limit", "1s=0x20"],
      ["--limit", "1s=10", "--lease-ms", "1e2"],
      ["--limit", "1s=10", "--lease-ms", ""],
      ["--limit", "1s=10", "--slot-groups", "2.0"],
    ]) {
      const result = await run(["quotas", "set", "odd", "--mode", "strict", ...odd, ...target]);
      expect(result.code, odd.join(" ")).not.toBe(0);
      expect(result.text, odd.join(" ")).toMatch(/--limit|--lease-ms|--slot-groups/);
    }
    expect((await run(["quotas", "list", ...target])).text).not.toMatch(/^odd\t/m);
  });

  it("approximate: a replay or a concurrent copy of a seq answers the allowance its applied copy reserved, no allowance is granted over max, and a lowered max grants nothing while the key is over it", async () => {
    const key = `wide-${Date.now()}`;
    const group = slotGroupOf(key, 2);
    const request = (instanceId: string, seq: number, usage: Array<[number, number]>): SyncRequest => ({
      instanceId,
      rule: "wide",
      group,
      seq,
      configVersion: "",
      entries: [{ key, usage, refunds: [], offered: 40, want: 0 }],
    });
    const instances = ["a", "b", "c", "d", "e", "f"].map((id) => `r3-${id}-${Date.now()}`);
    const replies: Array<{ id: string; seq: number; reply: SyncReply }> = [];
    const allowanceOf = (reply: SyncReply) => (reply.entries[0] as ApproximateAssignment).allowance;
    // each instance: seq 1 three times at once; seq 3; then seq 2 (half of its first allowance used) twice at once
    await Promise.all(
      instances.map(async (id) => {
        const first = await Promise.all([1, 2, 3].map(() => sync(request(id, 1, []))));
        replies.push(...first.map((reply) => ({ id, seq: 1, reply })));
        const spent = Math.floor(Math.max(...first.map(allowanceOf)) / 2);
        replies.push({ id, seq: 3, reply: await sync(request(id, 3, [])) });
        const second = request(id, 2, spent > 0 ? [[Date.now(), spent]] : []);
        const again = await Promise.all([sync(second), sync(second)]);
        replies.push(...again.map((reply) => ({ id, seq: 2, reply })));
      }),
    );
    for (const { reply } of replies) {
      const entry = reply.entries[0] as ApproximateAssignment;
      if (reply.status === "applied" && entry.allowance > 0) {
        expect(entry.used[0]).toBeLessThanOrEqual(60);
        expect(entry.used[1]).toBeLessThanOrEqual(120);
      }
    }
    for (const id of instances) {
      for (const seq of [1, 2]) {
        const copies = replies.filter((r) => r.id === id && r.seq === seq);
        expect(copies.map((r) => r.reply.status).sort()).toEqual(
          ["applied", ...Array(copies.length - 1).fill("duplicate")].sort(),
        );
        expect(new Set(copies.map((r) => allowanceOf(r.reply))).size).toBe(1);
      }
    }
    // the operator lowers max while allowances are out: the next sync carries the rule and, over it, grants 0
    await uploadRules(stack, quotasPolicy("review.quotas.2", 5), {});
    const after = await sync(request(instances[0] as string, 10, []));
    expect(after.rule?.limits.map((limit) => limit.max)).toEqual([5, 10]);
    const entry = after.entries[0] as ApproximateAssignment;
    if ((entry.used[0] as number) >= 5 || (entry.used[1] as number) >= 10) expect(entry.allowance).toBe(0);
    else expect(entry.used[0]).toBeLessThanOrEqual(5);
  });

  it("an SDK instance syncing over HTTP learns that the operator changed slotGroups from 1 to 4, and its syncs keep being answered (review3 defect, fixed)", async () => {
    const withGroups = (version: string, slotGroups: number) => {
      const base = quotasPolicy(version, 60);
      const grp = { name: "grp", mode: "approximate", limits: [{ window: "1s", max: 1000 }], slotGroups };
      return { ...base, quotas: [...base.quotas, grp] };
    };
    await uploadRules(stack, withGroups("review.groups.1", 1), {});
    const errors: Error[] = [];
    const quotas = createQuotas({
      transport: httpTransport({ url: stack.endpoints.functionUrl, signing: LOCAL_SIGNING }),
      onError: (error) => errors.push(error),
    });
    const keys = Array.from({ length: 16 }, (_, i) => `tenant-${i}`);
    for (const key of keys) await quotas.checkFresh("grp", key, 1);
    expect(errors).toEqual([]);
    await uploadRules(stack, withGroups("review.groups.2", 4), {});
    for (let round = 0; round < 5; round++) {
      for (const key of keys) quotas.check("grp", key, 1);
      errors.length = 0;
      await quotas.sync();
    }
    expect(quotas.resolve("grp", "tenant-0").rule.definition?.slotGroups).toBe(4);
    expect(errors.map((error) => error.message)).toEqual([]);
    await quotas.stop();
  });

  it("an SDK instance holding 256 keys of 256 characters (MAX_KEYS_PER_SYNC, MAX_KEY_LENGTH) over httpTransport gets every key an allowance: no sync body over the route's 64 KiB (review4 defect, fixed)", async () => {
    const base = quotasPolicy("review4.keys.1", 60);
    const many = { name: "many", mode: "approximate", limits: [{ window: "1s", max: 1_000_000 }] };
    await uploadRules(stack, { ...base, quotas: [...base.quotas, many] }, {});
    const errors: string[] = [];
    const quotas = createQuotas({
      // a generous timeout: this asserts what the route answers, not how fast a loaded machine is
      transport: httpTransport({ url: stack.endpoints.functionUrl, signing: LOCAL_SIGNING, timeoutMs: 20_000 }),
      onError: (error) => errors.push(error.message.slice(0, 80)),
    });
    const keys = Array.from({ length: MAX_KEYS_PER_SYNC }, (_, i) => `${i}-`.padEnd(MAX_KEY_LENGTH, "k"));
    for (const key of keys) quotas.check("many", key, 1);
    for (let round = 0; round < 4; round++) await quotas.sync();
    const admitted = keys.filter((key) => quotas.check("many", key, 1).allowed).length;
    expect({ admitted, errors: [...new Set(errors)] }).toEqual({ admitted: keys.length, errors: [] });
    await quotas.stop();
  });

  it("tollgate quotas usage reports the clients' instance count, and reading it does not change what clients are told (review3 defect, fixed)", async () => {
    // a rule of its own: the other tests' instances sync "wide" and would count for 5 s after their last sync
    const base = quotasPolicy("review.usage.1", 60);
    const solo = { name: "solo", mode: "approximate", limits: [{ window: "1s", max: 100 }] };
    await uploadRules(stack, { ...base, quotas: [...base.quotas, solo] }, {});
    const key = `usage-${Date.now()}`;
    const ask = async (seq: number) =>
      (
        await sync({
          instanceId: `r3-only-${key}`,
          rule: "solo",
          group: 0,
          seq,
          configVersion: "",
          entries: [{ key, usage: [], refunds: [], offered: 5, want: 0 }],
        })
      ).instances;
    expect(await ask(1)).toBe(1);
    const target = ["--endpoint", stack.endpoints.awsEndpoint, "--bucket", stack.endpoints.bucket];
    const redis = ["--redis", ...stack.endpoints.redis.slice(0, 1), "--namespace", quotasNamespace];
    const lines: string[] = [];
    const log = vi.spyOn(console, "log").mockImplementation((line: string) => void lines.push(line));
    try {
      expect(await runCli(["quotas", "usage", "solo", key, ...target, ...redis])).toBe(0);
    } finally {
      log.mockRestore();
    }
    expect(lines.join("\n")).toContain("active instances 1");
    expect(await ask(2)).toBe(1);
  });
});
