// Tollgate's Redis Functions libraries left by earlier deploys (functions/app/redis-libraries.ts and
// `tollgate redis libraries`), on the real cluster: listed per primary beside this build's, removed by
// --prune from primaries and replicas, nothing else touched, and a client still on a removed version
// answered on its next call.
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { CURRENT_LIBRARIES, listLibraries, pruneLibraries } from "../../../functions/app/redis-libraries.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { defineLibrary, loadLibrary } from "../../../sdk/src/protocol/index.ts";
import { cliOutput } from "../../support/cli-output.ts";
import { clusterPorts, connectCluster, primariesOf, uniqueNamespace } from "../../support/cluster.ts";
import { rulesOf, simplePolicy, T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
let nodes: Redis[];
beforeAll(() => {
  cluster = connectCluster();
  nodes = clusterPorts.map((port) => new Redis({ host: "127.0.0.1", port }));
});
afterAll(async () => {
  for (const node of nodes) node.disconnect();
  await cluster.quit();
});

/** A library of an earlier build: Tollgate's naming (`tollgate_` and a hash), other code. */
const earlierBuild = (version: string) =>
  defineLibrary({ capSends: `-- ${version}\nreturn function(keys, args) return 'old' end` });

/** A library that is not Tollgate's: never listed, never removed. */
const OTHER = "#!lua name=billing_lib\nredis.register_function('billing_total', function() return 7 end)";

const holds = async (node: Redis, name: string) =>
  ((await node.function("LIST", "LIBRARYNAME", name)) as unknown[]).length > 0;

/** Every node (primaries and replicas) once replication has caught up. */
async function settled(): Promise<Redis[]> {
  for (const { node } of await primariesOf(nodes)) await node.call("WAIT", 1, 5_000);
  return nodes;
}

describe("Redis libraries of other builds", () => {
  it("are listed per primary beside this build's, and pruning removes them alone, on primaries and replicas", async () => {
    for (const library of CURRENT_LIBRARIES) await loadLibrary(cluster, library);
    const old = [earlierBuild("v1"), earlierBuild("v2")];
    for (const library of old) await loadLibrary(cluster, library);
    const primaries = (await primariesOf(nodes)).map(({ node }) => node);
    for (const node of primaries) await node.function("LOAD", "REPLACE", OTHER);

    const listed = await listLibraries(cluster);
    expect(listed).toHaveLength(3);
    const current = CURRENT_LIBRARIES.map((library) => library.name).sort();
    for (const { current: held, stale } of listed) {
      expect(held).toEqual(current);
      expect(stale).toEqual(expect.arrayContaining(old.map((library) => library.name)));
      expect(stale).not.toContain("billing_lib");
    }

    const pruned = await pruneLibraries(cluster);
    for (const { stale } of pruned) expect(stale).toEqual(expect.arrayContaining(old.map((library) => library.name)));
    for (const node of await settled()) {
      for (const library of old) expect(await holds(node, library.name)).toBe(false);
      for (const name of current) expect(await holds(node, name)).toBe(true);
      expect(await holds(node, "billing_lib")).toBe(true);
    }
    for (const { stale } of await listLibraries(cluster)) expect(stale).toEqual([]);
    for (const node of primaries) await node.function("DELETE", "billing_lib");
  });

  it("removed under a running client, its version is loaded again by its next call, which is answered", async () => {
    const store = new RedisCapStore(cluster);
    const capper = new Capper({
      store,
      rules: () => rulesOf(simplePolicy({ push: [{ window: "1d", max: 1 }] })),
      clock: fixedClock(T0),
      namespace: uniqueNamespace(),
    });
    const kinds = (result: { decisions: { decision: string }[] }) => result.decisions.map((d) => d.decision);
    const first = await capper.capBatch({ campaignId: "c1", channel: "push", userIds: [1, 2] });
    expect(kinds(first)).toEqual(["allowed", "allowed"]);
    // an operator pruning from a build that does not know this one
    await pruneLibraries(cluster, []);
    for (const { current, stale } of await listLibraries(cluster)) expect([...current, ...stale]).toEqual([]);
    // the next campaign: decided on the state the first left (1 a day: users 1 and 2 capped, 3 allowed)
    const again = await capper.capBatch({ campaignId: "c2", channel: "push", userIds: [1, 2, 3] });
    expect(kinds(again)).toEqual(["capped", "capped", "allowed"]);
    for (const { current } of await listLibraries(cluster)) expect(current).toContain(CURRENT_LIBRARIES[0]?.name);
  });

  it("`tollgate redis libraries` prints each primary's, and --prune what it removed", async () => {
    for (const library of CURRENT_LIBRARIES) await loadLibrary(cluster, library);
    const old = earlierBuild("v3");
    await loadLibrary(cluster, old);
    const target = ["--redis", `127.0.0.1:${clusterPorts[0]}`];

    const listed = await cliOutput(["redis", "libraries", ...target]);
    expect(listed.code).toBe(0);
    const lines = listed.text.split("\n");
    expect(lines).toHaveLength(3);
    for (const line of lines) {
      expect(line).toMatch(
        /^127\.0\.0\.1:\d+\tthis build: tollgate_[0-9a-f]{8} tollgate_[0-9a-f]{8} tollgate_[0-9a-f]{8}\t/,
      );
      expect(line).toContain(`other builds: ${old.name}`);
    }

    const pruned = await cliOutput(["redis", "libraries", "--prune", ...target]);
    expect(pruned.code).toBe(0);
    for (const line of pruned.text.split("\n")) expect(line).toMatch(new RegExp(`\\tremoved: ${old.name}$`));
    for (const line of (await cliOutput(["redis", "libraries", ...target])).text.split("\n")) {
      expect(line).toMatch(/\tother builds: none$/);
    }

    const missing = await cliOutput(["redis", "libraries"]);
    expect(missing.code).toBe(1);
    expect(missing.text).toContain("--redis");
  });
});
