// Capping during a slot migration: a fault that is not the message's is retried, never decided wrong.
import calculateSlot from "cluster-key-slot";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { waitForCluster } from "../../../scripts/redis-cluster.ts";
import { capBlobKey, capIdentityKey, capTagOf, recordRangeOf } from "../../../sdk/src/protocol/index.ts";
import { basePort, clusterPorts, connectCluster, primariesOf, uniqueNamespace } from "../../support/cluster.ts";
import { rulesOf, T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
let store: RedisCapStore;
beforeAll(() => {
  cluster = connectCluster();
  store = new RedisCapStore(cluster);
});
afterAll(async () => {
  await cluster.quit();
});
const MINUTE = 60_000;

const policyWith = (version: string, caps: Record<string, { window: string; max: number }[]>) =>
  rulesOf({ version, channels: ["push"], segments: [], default: { name: "all", caps } });

describe("review: capping during a slot migration (DESIGN.md: exact; a fault not the message's is retried, never decided wrong)", () => {
  const nodes: Redis[] = [];
  beforeAll(() => {
    for (const port of clusterPorts) nodes.push(new Redis({ host: "127.0.0.1", port }));
  });
  afterAll(() => {
    for (const node of nodes) node.disconnect();
  });
  const primaries = () => primariesOf(nodes);
  type Primary = { node: Redis; id: string };
  const migrate = (source: Redis, target: Redis, keys: string[]) =>
    source.migrate("127.0.0.1", target.options.port as number, "", 0, 5_000, "KEYS", ...keys);
  const startMove = async (slot: number, source: Primary, target: Primary) => {
    await target.node.call("CLUSTER", "SETSLOT", String(slot), "IMPORTING", source.id);
    await source.node.call("CLUSTER", "SETSLOT", String(slot), "MIGRATING", target.id);
  };
  const endMove = async (slot: number, source: Primary, target: Primary) => {
    for (;;) {
      const keys = (await source.node.call("CLUSTER", "GETKEYSINSLOT", String(slot), "100")) as string[];
      if (keys.length === 0) break;
      await migrate(source.node, target.node, keys);
    }
    await target.node.call("CLUSTER", "SETSLOT", String(slot), "NODE", target.id);
    await source.node.call("CLUSTER", "SETSLOT", String(slot), "NODE", target.id);
  };

  it("a user whose record was moved ahead of its tag's identity table (resharding moves keys in batches) is still capped", async () => {
    const namespace = uniqueNamespace();
    const rules = policyWith("v1", { push: [{ window: "1d", max: 1 }] });
    const clock = fixedClock(T0);
    const capper = new Capper({ store, rules: () => rules, clock, namespace });
    const user = 5;
    const send = (campaignId: string) => capper.capBatch({ campaignId, channel: "push", userIds: [user] });
    expect((await send("c1")).decisions[0]?.decision).toBe("allowed");
    const slot = calculateSlot(capIdentityKey(namespace, capTagOf(user)));
    const found = await primaries();
    const source = found.find((p) => p.slots.some(([from, to]) => slot >= from && slot <= to));
    const target = found.find((p) => p !== source);
    if (!source || !target) throw new Error(`no owner of slot ${slot}`);
    let moved = false;
    let decision: string | undefined;
    try {
      await startMove(slot, source, target);
      await migrate(source.node, target.node, [capBlobKey(namespace, capTagOf(user), recordRangeOf(user))]);
      clock.advance(MINUTE);
      const second = send("c2").then((result) => result.decisions[0]?.decision);
      // the call gets its chance while the slot is split (declared keys: TRYAGAIN until the move ends)
      const early = await Promise.race([
        second,
        new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 500)),
      ]);
      await endMove(slot, source, target);
      moved = true;
      decision = early ?? (await second);
    } finally {
      // the slot goes back to its owner, and the cluster is whole again for the next test
      if (!moved) await endMove(slot, source, target);
      await startMove(slot, target, source);
      await endMove(slot, target, source);
      await waitForCluster({ basePort });
    }
    expect(decision).toBe("capped");
  });
});
