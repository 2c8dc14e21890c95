// Cap-sends after a scale-out: a new, empty primary joins and takes the slot of a tag
// that has sends; the next call there meets a node without the code (Redis Functions: "Function not found").
import { spawnSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import calculateSlot from "cluster-key-slot";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { StoreUnavailableError } from "../../../functions/core/shared/errors.ts";
import { binariesOf, engineOf, waitForCluster } from "../../../scripts/redis-cluster.ts";
import { capIdentityKey, capPageKey, capTagOf, pageOf } from "../../../sdk/src/protocol/index.ts";
import { basePort, clusterPorts, connectCluster, primariesOf, uniqueNamespace } from "../../support/cluster.ts";
import { rulesOf, T0 } from "../../support/rules.ts";

const NEW_PORT = basePort + 6;
const DIR = `/tmp/tollgate-review-scale-out-${NEW_PORT}`;
let cluster: TollgateCluster;
const nodes: Redis[] = [];
beforeAll(() => {
  cluster = connectCluster();
  for (const port of clusterPorts) nodes.push(new Redis({ host: "127.0.0.1", port }));
});
afterAll(async () => {
  for (const node of nodes) node.disconnect();
  await cluster.quit();
});

const rules = rulesOf({
  version: "v1",
  channels: ["push"],
  segments: [],
  default: { name: "rest", caps: { push: [{ window: "1d", max: 1 }] } },
});

describe("review: scale-out (a node added empty)", () => {
  it("a tag whose slot moves to a new, empty primary is capped or refused during the move (never decided on a partly moved history) and capped after it", async () => {
    const namespace = uniqueNamespace();
    const clock = fixedClock(T0);
    const store = new RedisCapStore(cluster);
    const capper = new Capper({ store, rules: () => rules, clock, namespace });
    const users = [13 * 1024 + 5, 13 * 1024 + 300, ...Array.from({ length: 20 }, (_, i) => 13 * 1024 + 512 + i)];
    const send = async (campaignId: string) =>
      (await capper.capBatch({ campaignId, channel: "push", userIds: users })).decisions.map((d) => d.decision);
    expect(await send("c1")).toEqual(users.map(() => "allowed"));
    const slot = calculateSlot(capIdentityKey(namespace, capTagOf(users[0] as number)));
    rmSync(DIR, { recursive: true, force: true });
    mkdirSync(DIR, { recursive: true });
    writeFileSync(
      `${DIR}/redis.conf`,
      [
        `port ${NEW_PORT}`,
        "bind 127.0.0.1",
        `dir ${DIR}`,
        "daemonize yes",
        `pidfile ${DIR}/redis.pid`,
        `logfile ${DIR}/redis.log`,
        "cluster-enabled yes",
        "cluster-config-file nodes.conf",
        "cluster-node-timeout 2000",
        "appendonly no",
        'save ""',
        "",
      ].join("\n"),
    );
    expect(spawnSync(binariesOf(engineOf()).server, [`${DIR}/redis.conf`]).status).toBe(0);
    const fresh = new Redis({ host: "127.0.0.1", port: NEW_PORT });
    const found = await primariesOf(nodes);
    const source = found.find((p) => p.slots.some(([from, to]) => slot >= from && slot <= to));
    if (!source) throw new Error(`no owner of slot ${slot}`);
    const freshId = async () => (await fresh.call("CLUSTER", "MYID")) as string;
    // `first` keys move first, then `during` runs while the slot is split between the two nodes
    const move = async (
      from: { node: Redis; id: string },
      to: { node: Redis; id: string },
      first: string[] = [],
      during: () => Promise<void> = async () => {},
    ) => {
      await to.node.call("CLUSTER", "SETSLOT", String(slot), "IMPORTING", from.id);
      await from.node.call("CLUSTER", "SETSLOT", String(slot), "MIGRATING", to.id);
      if (first.length > 0) {
        await from.node.migrate("127.0.0.1", to.node.options.port as number, "", 0, 5_000, "KEYS", ...first);
      }
      await during();
      for (;;) {
        const keys = (await from.node.call("CLUSTER", "GETKEYSINSLOT", String(slot), "100")) as string[];
        if (keys.length === 0) break;
        await from.node.migrate("127.0.0.1", to.node.options.port as number, "", 0, 5_000, "KEYS", ...keys);
      }
      for (const p of [...nodes, fresh]) {
        if ((await p.role())[0] === "master") await p.call("CLUSTER", "SETSLOT", String(slot), "NODE", to.id);
      }
    };
    let joined = false;
    try {
      await fresh.call("CLUSTER", "MEET", "127.0.0.1", String(clusterPorts[0]));
      for (let tries = 0; ; tries++) {
        const id = await freshId();
        const known = await Promise.all(nodes.map((node) => node.call("CLUSTER", "NODES") as Promise<string>));
        const itKnows = ((await fresh.call("CLUSTER", "NODES")) as string).split("\n").length > nodes.length;
        const ready = ((await fresh.call("CLUSTER", "INFO")) as string).includes("cluster_state:ok");
        if (ready && itKnows && known.every((text) => text.includes(id))) break;
        if (tries > 100) throw new Error("the new node did not join");
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      joined = true;
      const target = { node: fresh, id: await freshId() };
      // the identity table and the page block move first: a block-path call meets ASK to the new node
      const blockUsers = users.slice(2);
      const moved = [
        capIdentityKey(namespace, capTagOf(users[0] as number)),
        capPageKey(namespace, pageOf(blockUsers[0] as number)),
      ];
      await move(source, target, moved, async () => {
        clock.advance(60_000);
        // capped there, or not run (ioredis follows an ASK only to a node it knows, and a node that owns no
        // slot yet is not in the slot map): never decided on a missing history
        const short = new Capper({
          store: new RedisCapStore(cluster, { deadlineMs: 1_000 }),
          rules: () => rules,
          clock,
          namespace,
        });
        const during = await short
          .capBatch({ campaignId: "c2", channel: "push", userIds: blockUsers })
          .then((result) => result.decisions.map((d) => d.decision))
          .catch((error: unknown) => error);
        // Refused as "not run" (ASK or TRYAGAIN until the deadline), or, on a slow machine, cut by the
        // deadline with an attempt in flight ("no answer", which may have run: the consumer retries it and
        // the campaign ID makes the retry count nothing twice). Never "allowed".
        if (during instanceof StoreUnavailableError) {
          expect(during.message).toMatch(during.mayHaveRun ? /: no answer: / : /: not (run|sent): /);
        } else expect(during).toEqual(blockUsers.map(() => "capped"));
      });
      clock.advance(60_000);
      expect(await send("c3")).toEqual(users.map(() => "capped"));
      await move(target, source);
    } finally {
      if (joined) {
        const id = await freshId();
        for (const node of nodes) await node.call("CLUSTER", "FORGET", id).catch(() => undefined);
      }
      fresh.disconnect();
      spawnSync("redis-cli", ["-p", String(NEW_PORT), "SHUTDOWN", "NOSAVE"]);
      await waitForCluster({ basePort });
    }
  }, 60_000);
});
