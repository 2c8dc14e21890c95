// Cap-sends as a Redis Function, "Function not found" on one primary while another
// primary does not answer.
import calculateSlot from "cluster-key-slot";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRedisCluster, RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { waitForCluster } from "../../../scripts/redis-cluster.ts";
import { capIdentityKey, capTagOf, USERS_PER_GROUP } from "../../../sdk/src/protocol/index.ts";
import { basePort, clusterPorts, primariesOf, uniqueNamespace } from "../../support/cluster.ts";
import { rulesOf, T0 } from "../../support/rules.ts";

const nodes: Redis[] = [];
beforeAll(() => {
  for (const port of clusterPorts) nodes.push(new Redis({ host: "127.0.0.1", port }));
});
afterAll(() => {
  for (const node of nodes) node.disconnect();
});

const rules = rulesOf({
  version: "v1",
  channels: ["push"],
  segments: [],
  default: { name: "rest", caps: { push: [{ window: "1d", max: 1 }] } },
});

describe("review: the cap-sends library missing on one primary", () => {
  it("a call on a primary that lost the library (FUNCTION FLUSH, a node restarted empty) is answered while another primary is paused", async () => {
    const namespace = uniqueNamespace();
    const primaries = await primariesOf(nodes);
    const ownerOf = (tag: number) => {
      const slot = calculateSlot(capIdentityKey(namespace, tag));
      return primaries.findIndex((p) => p.slots.some(([from, to]) => slot >= from && slot <= to));
    };
    const tagA = 21;
    const a = primaries[ownerOf(tagA)] as (typeof primaries)[number];
    const b = primaries.find((p) => p !== a) as (typeof primaries)[number];
    const pid = Number(((await b.node.info("server")).match(/process_id:(\d+)/) as RegExpMatchArray)[1]);
    const cluster: TollgateCluster = createRedisCluster({
      nodes: clusterPorts.slice(0, 3).map((port) => ({ host: "127.0.0.1", port })),
      commandTimeoutMs: 400,
    });
    const clock = fixedClock(T0);
    const capper = new Capper({
      store: new RedisCapStore(cluster, { deadlineMs: 1_200 }),
      rules: () => rules,
      clock,
      namespace,
    });
    const users = [tagA * USERS_PER_GROUP + 1, tagA * USERS_PER_GROUP + 2];
    expect(capTagOf(users[0] as number)).toBe(tagA);
    try {
      // the library loaded and the client's connections open
      expect(
        (await capper.capBatch({ campaignId: "c1", channel: "push", userIds: users })).decisions.map((d) => d.decision),
      ).toEqual(["allowed", "allowed"]);
      await a.node.function("FLUSH");
      process.kill(pid, "SIGSTOP");
      let decisions: string[] | Error;
      try {
        decisions = await capper
          .capBatch({ campaignId: "c2", channel: "push", userIds: users, at: T0 + 1 })
          .then((result) => result.decisions.map((d) => d.decision))
          .catch((error: Error) => error);
      } finally {
        process.kill(pid, "SIGCONT");
      }
      // A's call needs only A: B not answering must not fail it (the reload that timed out on B loaded A,
      // so the retry within the deadline is answered)
      expect(decisions).toEqual(["capped", "capped"]);
    } finally {
      cluster.disconnect();
      await waitForCluster({ basePort });
    }
  }, 30_000);
});
