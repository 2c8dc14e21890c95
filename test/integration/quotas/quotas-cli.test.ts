// `tollgate quotas list|set|usage` against the local stack: a rule set from the CLI is in the policy, in
// Redis at once (the next sync of a client that held the old version carries it), and its usage readable.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LOCAL_SIGNING } from "../../../scripts/local/local-principals.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { createQuotas } from "../../../sdk/src/quotas.ts";
import { httpTransport } from "../../../sdk/src/transports/http.ts";
import { redisTransport } from "../../../sdk/src/transports/redis.ts";
import { cliOutput } from "../../support/cli-output.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { testStack, uploadRules } from "../../support/pipeline.ts";
import { signedFetch } from "../../support/signed-fetch.ts";

const namespace = uniqueNamespace();
let stack: LocalStack;
let target: string[];
beforeAll(async () => {
  stack = await testStack({ environment: { KEY_NAMESPACE: namespace, REFRESH_SECONDS: "0" } });
  const { awsEndpoint, bucket, redis } = stack.endpoints;
  target = ["--endpoint", awsEndpoint, "--bucket", bucket, "--redis", ...redis.slice(0, 1), "--namespace", namespace];
  await uploadRules(
    stack,
    { version: "cli.1", channels: ["push"], segments: [], default: { name: "rest", caps: {} } },
    {},
  );
});
afterAll(async () => {
  await stack.stop();
});

describe("tollgate quotas", () => {
  it("sets a rule, lists it, reaches a client's next sync at once, and reads a key's usage", async () => {
    expect((await cliOutput(["quotas", "list", ...target.slice(0, 4)])).text).toContain("has no quota rules");
    const set = await cliOutput([
      "quotas",
      "set",
      "api",
      "--mode",
      "approximate",
      "--limit",
      "1s=50",
      "--tenant",
      "local",
      ...target,
    ]);
    expect(set).toMatchObject({ code: 0 });
    expect(set.text).toContain("written to Redis");
    expect((await cliOutput(["quotas", "list", ...target.slice(0, 4)])).text).toMatch(/^api\tapproximate\t50\/1s\t/);

    const sync = await signedFetch(`${stack.endpoints.functionUrl}/v1/quotas/sync`, {
      method: "POST",
      body: JSON.stringify({
        instanceId: "c1",
        rule: "api",
        group: 0,
        seq: 1,
        configVersion: "",
        entries: [{ key: "t", usage: [[Date.now(), 20]], refunds: [], offered: 20, want: 0 }],
      }),
    });
    // a client that held no version gets the rule with its first sync
    expect(await sync.json()).toMatchObject({ status: "applied", rule: { limits: [{ windowMs: 1000, max: 50 }] } });
    const usage = await cliOutput(["quotas", "usage", "api", "t", ...target]);
    // the 20 reported, and the 30 left that the client's sync reserved as its allowance
    expect(usage.text).toContain("api t\t1s\tused or reserved 50 of 50");
    // a read: the operator is not an instance, for the figure it prints nor for what clients are told
    expect(usage.text).toContain("active instances 1");
    const next = await signedFetch(`${stack.endpoints.functionUrl}/v1/quotas/sync`, {
      method: "POST",
      body: JSON.stringify({
        instanceId: "c1",
        rule: "api",
        group: 0,
        seq: 2,
        configVersion: "",
        entries: [{ key: "t", usage: [], refunds: [], offered: 0, want: 0 }],
      }),
    });
    expect(await next.json()).toMatchObject({ status: "applied", instances: 1 });
    expect((await cliOutput(["quotas", "usage", "api", "t", ...target])).text).toContain("active instances 1");

    const bad = await cliOutput(["quotas", "set", "api", "--mode", "strict", "--limit", "1s=0", ...target]);
    expect(bad.code).toBe(1);
    expect(bad.text).toContain("quotas[0].limits[0].max");
  });

  it("refuses numbers that are not decimal integers as written, naming each option, and uploads nothing", async () => {
    const before = (await cliOutput(["quotas", "list", ...target.slice(0, 4)])).text;
    const cases: [string[], string][] = [
      [["--limit", "1s=50=7"], '--limit: expected window=max, got "1s=50=7"'],
      [["--limit", "1s=0x20"], '--limit: expected a decimal integer, got "0x20"'],
      [["--limit", "1s=10", "--lease-ms", "1e2"], '--lease-ms: expected a decimal integer, got "1e2"'],
      [["--limit", "1s=10", "--lease-ms", ""], '--lease-ms: expected a decimal integer, got ""'],
      [["--limit", "1s=10", "--slot-groups", "2.0"], '--slot-groups: expected a decimal integer, got "2.0"'],
    ];
    for (const [odd, message] of cases) {
      const result = await cliOutput(["quotas", "set", "odd", "--mode", "strict", ...odd, ...target]);
      expect(result, odd.join(" ")).toMatchObject({ code: 1 });
      expect(result.text).toContain(message);
    }
    // every problem at once
    const both = await cliOutput([
      "quotas",
      "set",
      "odd",
      "--mode",
      "strict",
      "--limit",
      "1s=x",
      "--lease-ms",
      "5.0",
      ...target,
    ]);
    expect(both.text).toContain("--limit: expected a decimal integer");
    expect(both.text).toContain("--lease-ms: expected a decimal integer");
    expect((await cliOutput(["quotas", "list", ...target.slice(0, 4)])).text).toBe(before);
  });

  it("quotas remove takes a rule out for every transport: a client syncing directly (norule) and one over the Function URL (403: its tenant no longer syncs it) both deny", async () => {
    // a removed rule stayed in Redis: direct clients kept their allowances while the HTTP route said norule
    const set = await cliOutput([
      "quotas",
      "set",
      "gone",
      "--mode",
      "approximate",
      "--limit",
      "1s=100",
      "--tenant",
      "local",
      ...target,
    ]);
    expect(set).toMatchObject({ code: 0 });
    const cluster = connectCluster();
    // both as the local tenant: under its namespace, and signed by its principal
    const direct = createQuotas({ transport: redisTransport({ redis: cluster, namespace, tenant: "local" }) });
    const overHttp = createQuotas({
      transport: httpTransport({ url: stack.endpoints.functionUrl, signing: LOCAL_SIGNING }),
    });
    try {
      for (const quotas of [direct, overHttp]) expect((await quotas.checkFresh("gone", "tenant-1")).allowed).toBe(true);
      // `quotas remove` runs in a process that never wrote the rule: the removal comes from the store's index
      const removed = await cliOutput(["quotas", "remove", "gone", ...target]);
      expect(removed).toMatchObject({ code: 0 });
      expect(removed.text).toContain("written to Redis");
      for (const quotas of [direct, overHttp]) {
        await quotas.sync();
        await quotas.sync();
        // denied under unknownRule (deny), not admitted under the removed approximate rule's share
        expect(quotas.check("gone", "tenant-1")).toMatchObject({ allowed: false, limit: 0, policy: "" });
        expect(quotas.engine.rule("gone")?.known).toBe(false);
      }
      expect((await cliOutput(["quotas", "list", ...target.slice(0, 4)])).text).not.toContain("gone");
    } finally {
      await direct.stop();
      await overHttp.stop();
      await cluster.quit();
    }
  });

  it("refuses a slotGroups change of a rule in service, naming quotas[i].slotGroups, and leaves the bucket and Redis as they were", async () => {
    // slotGroups 1 -> 8 moved every key to other hash slots, where strict admitted 78-80 of 40
    expect(
      await cliOutput(["quotas", "set", "layout", "--mode", "strict", "--limit", "1s=40", ...target]),
    ).toMatchObject({ code: 0 });
    const before = (await cliOutput(["quotas", "list", ...target.slice(0, 4)])).text;
    const change = await cliOutput([
      "quotas",
      "set",
      "layout",
      "--mode",
      "strict",
      "--limit",
      "1s=40",
      "--slot-groups",
      "8",
      ...target,
    ]);
    expect(change.code).toBe(1);
    expect(change.text).toMatch(
      /quotas\[\d+\]\.slotGroups: rule "layout" is in service with slotGroups 1; changing it to 8/,
    );
    expect(change.text).toContain("tollgate quotas remove layout");
    expect((await cliOutput(["quotas", "list", ...target.slice(0, 4)])).text).toBe(before);
  });
});
