// Each test guards against a defect once found here, fixed since; its comment quotes the contract it broke.
// Peeks of cap-sends as no-writes readers, against a node whose library is missing (a fresh node,
// a FUNCTION FLUSH, or a rolling deploy whose new library version no node holds yet).
//
// Contract (docs/decisions/0007-peeks-are-no-writes-readers.md; commit 2ce0d60): a campaign peek or /v1/frequency with
// consume: false "calls the capSendsRead function (same chunk, registered no-writes), so it answers on a node
// past maxmemory; counted sends there are refused (OOM, a StoreReplyError)".
// And redis-functions.ts: a node without the library ("Function not found") "gets it loaded and the call
// sent once more".
//
// FUNCTION LOAD is a write command flagged DENYOOM: a node past maxmemory refuses it. The loader loads on
// every primary at once and rejects as the first refusal came, so
//  - a peek on a node past maxmemory that lacks the library (the first call after a deploy) fails with OOM;
//  - a node past maxmemory that *holds* the library still refuses the load, so a call (peek or count) on a
//    healthy node that lacks the library fails too: one full node stops every new-library call cluster-wide.
import calculateSlot from "cluster-key-slot";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tollgateLibrary } from "../../../functions/adapters/lua-scripts.ts";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import type { Rules } from "../../../functions/core/capping/rules-source.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { capIdentityKey, capTagOf, loadLibrary } from "../../../sdk/src/protocol/index.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { rulesOf, simplePolicy, T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  // leave every primary with the library and its memory limit as found
  await loadLibrary(cluster, tollgateLibrary);
  await cluster.quit();
});

function capperOn(rules: Rules, namespace = uniqueNamespace()) {
  return new Capper({ store: new RedisCapStore(cluster), rules: () => rules, clock: fixedClock(T0), namespace });
}

/** The primary serving `key`'s slot. */
function primaryOf(key: string): Redis {
  const slot = calculateSlot(key);
  const address = (cluster.slots[slot] ?? [])[0];
  const node = cluster.nodes("master").find((n) => `${n.options.host}:${n.options.port}` === address);
  if (!node) throw new Error(`no primary for slot ${slot}`);
  return node;
}

async function withMaxmemory<T>(nodes: readonly Redis[], run: () => Promise<T>): Promise<T> {
  const before = await Promise.all(nodes.map((node) => node.config("GET", "maxmemory") as Promise<string[]>));
  try {
    await Promise.all(nodes.map((node) => node.config("SET", "maxmemory", "1")));
    return await run();
  } finally {
    await Promise.all(nodes.map((node, i) => node.config("SET", "maxmemory", before[i]![1]!)));
  }
}

describe("review8: peeks as readers vs. library loading", () => {
  const rules = rulesOf(simplePolicy({ push: [{ window: "1d", max: 2 }] }));

  it("holds (coverage): the library loaded everywhere, a peek answers on every primary past maxmemory", async () => {
    const capper = capperOn(rules);
    await capper.checkUser({ userId: 77, channel: "push" });
    await loadLibrary(cluster, tollgateLibrary);
    const primaries = cluster.nodes("master");
    const check = await withMaxmemory(primaries, () =>
      capper.checkUser({ userId: 77, channel: "push", consume: false }),
    );
    expect(check.allowed).toBe(true);
  });

  // "so it answers on a node past maxmemory": not on a node that does not hold the library yet (the first
  // peek after a deploy, a restarted or replaced node): FUNCTION LOAD is refused with OOM, and the peek with it.
  it("a peek answers on a node past maxmemory that lacks the library (new deploy / flushed node)", async () => {
    const namespace = uniqueNamespace();
    const capper = capperOn(rules, namespace);
    await capper.checkUser({ userId: 77, channel: "push" });
    const node = primaryOf(capIdentityKey(namespace, capTagOf(77)));
    await node.function("FLUSH");
    const check = await withMaxmemory([node], () => capper.checkUser({ userId: 77, channel: "push", consume: false }));
    expect(check.allowed).toBe(true);
    expect(check.windows?.[0]?.used).toBe(1);
  });

  // Worse: the node past maxmemory holds the library; the node the call goes to is healthy (below
  // maxmemory) and only lacks it. The load goes to every primary, the full one answers OOM, and the healthy
  // node's peek (and counted send) fail: "a primary without it gets it loaded, then the call" does not happen.
  it("a peek (and a counted send) on a healthy node without the library answer while another primary is past maxmemory", async () => {
    const namespace = uniqueNamespace();
    const capper = capperOn(rules, namespace);
    await capper.checkUser({ userId: 77, channel: "push" });
    await loadLibrary(cluster, tollgateLibrary);
    const healthy = primaryOf(capIdentityKey(namespace, capTagOf(77)));
    const full = cluster.nodes("master").filter((n) => n !== healthy);
    await healthy.function("FLUSH");
    const [peeked, counted] = await withMaxmemory(full, async () => [
      await capper.checkUser({ userId: 77, channel: "push", consume: false }).catch((e: Error) => e),
      await capper.checkUser({ userId: 77, channel: "push" }).catch((e: Error) => e),
    ]);
    expect(peeked).not.toBeInstanceOf(Error);
    expect(counted).not.toBeInstanceOf(Error);
  });
});
