// The hostile-but-valid capping workloads of the engine issue, on the real cluster: busy pages, big
// policies, sparse messages, busy single users, skewed clocks and old `at` values.
import { decode } from "@msgpack/msgpack";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import {
  type CapStore,
  MAX_CALLS_IN_FLIGHT,
  planCapSends,
  scriptProfiles,
} from "../../../functions/core/capping/cap-sends-script.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import type { CapBatchResult } from "../../../functions/core/capping/decisions.ts";
import { DEFAULT_REDELIVERY_MS, keptHorizonMs } from "../../../functions/core/capping/policy.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { ValidationError } from "../../../functions/core/shared/errors.ts";
import { countingCapStore } from "../../../scripts/bench/capping-workloads.ts";
import { capBlobKey, capPageKey, capRecordKey } from "../../../sdk/src/protocol/index.ts";
import { decodeBlock, decodeRecord, readUserRecord } from "../../support/block.ts";
import { CappingModel } from "../../support/capping-model.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { DAY, HOUR, rulesOf, simplePolicy, T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

const kinds = (result: CapBatchResult) => result.decisions.map((d) => d.decision);

function capperAt(rules: ReturnType<typeof rulesOf>, store: CapStore = new RedisCapStore(cluster)) {
  const clock = fixedClock(T0);
  const namespace = uniqueNamespace();
  return { capper: new Capper({ store, rules: () => rules, clock, namespace }), clock, namespace };
}

describe("capping workloads", () => {
  it("answers 256 users × 260 anonymous checks at 2 per 1m (66,560 events) exactly as the model does", async () => {
    const rules = rulesOf(simplePolicy({ push: [{ window: "1m", max: 2 }] }));
    const namespace = uniqueNamespace();
    const store = new RedisCapStore(cluster);
    const model = new CappingModel(rules.policy, () => rules.policy.defaultSegment);
    const users = Array.from({ length: 256 }, (_, i) => i);
    const profiles = scriptProfiles(rules.policy, "push", DEFAULT_REDELIVERY_MS);
    // 260 rounds a quarter second apart; each user's check is its own (15 users a call: user records)
    for (let round = 0; round < 260; round++) {
      const now = T0 + round * 250;
      const expected = model.apply({
        mode: "count",
        now,
        at: now,
        channel: "push",
        campaignId: "",
        exemptCounted: false,
        users,
      });
      const replies = await Promise.all(
        Array.from({ length: Math.ceil(users.length / 15) }, async (_, c) => {
          const sortedIds = Uint32Array.from(users.slice(15 * c, 15 * c + 15));
          const [call, ...more] = planCapSends({
            namespace,
            now,
            at: now,
            mode: "count",
            channel: "push",
            campaignId: "",
            forced: false,
            horizonMs: keptHorizonMs(rules.policy, DEFAULT_REDELIVERY_MS),
            profiles,
            sortedIds,
            segmentOf: new Uint8Array(sortedIds.length).fill(rules.policy.defaultSegment),
          });
          expect(more).toEqual([]);
          return [...(await store.capSends(call!.keys, call!.args))];
        }),
      );
      expect(replies.flat().map((code) => (code === 0 ? "allowed" : { capped: code - 3 }))).toEqual(expected);
    }
  });

  it("widens a block's event numbers when absorbed user records outgrow them", async () => {
    const rules = rulesOf(simplePolicy({ push: [{ window: "1h", max: 4 }] }));
    const { capper, clock, namespace } = capperAt(rules);
    const users = Array.from({ length: 256 }, (_, i) => i);
    // two sends per user through user records (one user a call), each at its own millisecond
    for (let round = 0; round < 2; round++) {
      await Promise.all(
        users.map((user) => {
          clock.set(T0 + round * 1000 + user);
          return capper.capBatch({ campaignId: `solo-${round}-${user}`, channel: "push", userIds: [user] });
        }),
      );
    }
    clock.set(T0 + 5000);
    expect(kinds(await capper.capBatch({ campaignId: "dense", channel: "push", userIds: users }))).toEqual(
      Array(256).fill("allowed"),
    );
    const block = decodeBlock((await cluster.getBuffer(capPageKey(namespace, 0)))!);
    expect(block.events.length).toBeGreaterThan(255);
    expect(block.width).toBe(2);
    expect(block.history(200)).toEqual(["push:solo-0-200", "push:solo-1-200", "push:dense"]);
    expect(await cluster.hlen(capRecordKey(namespace, 0, 0))).toBe(0);
    // 256 distinct histories passed the blob size: the range split into parts, and the block absorbed them all
    expect((await cluster.getBuffer(capBlobKey(namespace, 0, 0)))?.[0]).toBe(2);
    for (const user of users) expect(await readUserRecord(cluster, namespace, user)).toBeNull();
    expect(kinds(await capper.capBatch({ campaignId: "4th", channel: "push", userIds: users }))).toEqual(
      Array(256).fill("allowed"),
    );
    expect(kinds(await capper.capBatch({ campaignId: "5th", channel: "push", userIds: users }))).toEqual(
      Array(256).fill("capped"),
    );
  });

  it("decides a 256-user call under 65 segments × 32 caps as the model does, sending only the segments present", async () => {
    const caps = (segment: number) => ({
      push: Array.from({ length: 32 }, (_, i) => ({ window: `${i + 1}h`, max: 1 + ((i + segment) % 3) })),
    });
    const members: Record<string, number[]> = {};
    const document = {
      version: "big",
      channels: ["push"],
      segments: Array.from({ length: 64 }, (_, s) => {
        members[`s${s}`] = Array.from({ length: 4 }, (_, k) => s * 4 + k);
        return { name: `s${s}`, bitmap: `segments/s${s}.roaring`, caps: caps(s) };
      }),
      default: { name: "rest", caps: caps(64) },
    };
    const rules = rulesOf(document, members);
    const { capper, clock } = capperAt(rules);
    const model = new CappingModel(rules.policy, (user) => Math.min(Math.floor(user / 4), 64));
    const users = Array.from({ length: 256 }, (_, i) => i);
    for (let step = 0; step < 4; step++) {
      const now = T0 + step * 20 * 60_000;
      clock.set(now);
      const result = await capper.capBatch({ campaignId: `c${step}`, channel: "push", userIds: users });
      const expected = model.apply({
        mode: "count",
        now,
        at: now,
        channel: "push",
        campaignId: `c${step}`,
        exemptCounted: false,
        users,
      });
      expect(
        result.decisions.map((d) =>
          d.decision === "capped"
            ? { capped: rules.policy.capsFor(Math.min(Math.floor(d.userId / 4), 64), "push").indexOf(d.cap!) }
            : d.decision,
        ),
      ).toEqual(expected);
    }
    // a call carries the caps of its users' segments only: 2 of the 65 here
    const [call] = planCapSends({
      namespace: "tg",
      now: T0,
      at: T0,
      mode: "peek",
      channel: "push",
      campaignId: "x",
      forced: false,
      horizonMs: keptHorizonMs(rules.policy, DEFAULT_REDELIVERY_MS),
      profiles: scriptProfiles(rules.policy, "push", DEFAULT_REDELIVERY_MS),
      sortedIds: Uint32Array.from([0, 1, 4, 5]),
      segmentOf: Uint8Array.from([0, 0, 1, 1]),
    });
    expect(decode(call!.args[6] as Buffer)).toHaveLength(2);
  });

  it("decides one message of 90,000 scattered IDs in few calls, never more than the bound in flight", async () => {
    const rules = rulesOf(simplePolicy({ push: [{ window: "1d", max: 1 }] }));
    const counting = countingCapStore(new RedisCapStore(cluster));
    const { capper } = capperAt(rules, counting);
    let seed = 12_345;
    const userIds = Array.from({ length: 90_000 }, () => {
      seed = (Math.imul(seed, 1_103_515_245) + 12_345) >>> 0;
      return seed;
    });
    const distinct = new Set(userIds).size;
    const first = await capper.capBatch({ campaignId: "sparse", channel: "push", userIds });
    expect(first.totals.unsegmented).toMatchObject({ allowed: distinct });
    expect(counting.mostInFlight).toBeLessThanOrEqual(MAX_CALLS_IN_FLIGHT);
    expect(counting.calls).toBeLessThan(90_000 / 20);
    const again = await capper.capBatch({ campaignId: "sparse", channel: "push", userIds });
    expect(again.totals.unsegmented).toMatchObject({ allowed: 0, duplicate: 90_000 - (90_000 - distinct) });
  });

  it("keeps a user sending at 1 per 1s: what its window needs in full, older sends in the tail for the redelivery bound only", async () => {
    const rules = rulesOf(simplePolicy({ push: [{ window: "1s", max: 1 }] }));
    const clock = fixedClock(T0);
    const namespace = uniqueNamespace();
    // a queue that redelivers for 2 minutes: sends are kept 1s backfill + 2m + 5m skew
    const redeliveryMs = 2 * 60_000;
    const capper = new Capper({
      store: new RedisCapStore(cluster),
      rules: () => rules,
      clock,
      namespace,
      redeliveryMs,
    });
    const user = 77;
    for (let i = 0; i < 600; i++) {
      clock.set(T0 + i * 1_000);
      const result = await capper.capBatch({ campaignId: `s${i}`, channel: "push", userIds: [user] });
      expect(result.decisions[0]!.decision).toBe("allowed");
    }
    const now = T0 + 599_000;
    const record = decodeRecord((await readUserRecord(cluster, namespace, user))!);
    const windowPart = record.filter((send) => send.part === "window").map((send) => send.at);
    const tail = record.filter((send) => send.part === "tail").map((send) => send.at);
    // the window part: 1s backfill + 1s window + 5m skew = 302 s, as of the last write
    expect(windowPart).toEqual(Array.from({ length: 302 }, (_, k) => now - 301_000 + k * 1000));
    // the tail: older sends still inside 1s + 2m + 5m = 421 s
    expect(tail).toEqual(Array.from({ length: 119 }, (_, k) => now - 420_000 + k * 1000));
    clock.set(now + 1000);
    // a redelivery of a send in the tail, and one in the window part, are recognised; s179 is still stored
    // but 421 s old now: past the bound, it is not
    const again = (i: number) => capper.peek({ campaignId: `s${i}`, channel: "push", userIds: [user] });
    expect(kinds(await again(180))).toEqual(["duplicate"]);
    expect(kinds(await again(599))).toEqual(["duplicate"]);
    expect(kinds(await again(179))).toEqual(["allowed"]);
  });

  it("never rewrites a page block for a single-user call, and still counts the block's sends", async () => {
    const rules = rulesOf(simplePolicy({ push: [{ window: "1d", max: 3 }] }));
    const { capper, clock, namespace } = capperAt(rules);
    const users = Array.from({ length: 64 }, (_, i) => i);
    const solo = (campaignId: string, user: number) =>
      capper.capBatch({ campaignId, channel: "push", userIds: [user] });
    clock.set(T0 + HOUR);
    await capper.capBatch({ campaignId: "dense", channel: "push", userIds: users });
    const before = await cluster.getBuffer(capPageKey(namespace, 0));
    clock.set(T0 + 2 * HOUR);
    expect(kinds(await solo("solo-a", 5))).toEqual(["allowed"]);
    expect(kinds(await solo("solo-b", 5))).toEqual(["allowed"]);
    expect(kinds(await solo("solo-c", 5))).toEqual(["capped"]); // dense + a + b
    expect(kinds(await solo("solo-d", 7))).toEqual(["allowed"]);
    expect(await cluster.getBuffer(capPageKey(namespace, 0))).toEqual(before);
    // the next dense call writes user 7 through the block, taking its record along; user 5 is capped
    // (not written), so its record stays where it is
    const dense = await capper.capBatch({ campaignId: "dense-2", channel: "push", userIds: users });
    expect([dense.decisions[5]!.decision, dense.decisions[7]!.decision]).toEqual(["capped", "allowed"]);
    const block = decodeBlock((await cluster.getBuffer(capPageKey(namespace, 0)))!);
    expect(block.history(7)).toEqual(["push:dense", "push:solo-d", "push:dense-2"]);
    // the block absorbed user 7's record; user 5's stays
    expect(await readUserRecord(cluster, namespace, 7)).toBeNull();
    expect(await readUserRecord(cluster, namespace, 5)).not.toBeNull();
    expect(
      kinds(await capper.capBatch({ campaignId: "dense-3", channel: "push", userIds: users })).slice(5, 8),
    ).toEqual(["capped", "allowed", "capped"]);
  });

  it("counts a send stamped ahead: two consumers 20 ms apart cannot both pass a 1-a-day cap", async () => {
    const rules = rulesOf(simplePolicy({ push: [{ window: "1d", max: 1 }] }));
    const ahead = capperAt(rules);
    const behind = new Capper({
      store: new RedisCapStore(cluster),
      rules: () => rules,
      clock: fixedClock(T0 + DAY),
      namespace: ahead.namespace,
    });
    ahead.clock.set(T0 + DAY + 20);
    expect(kinds(await ahead.capper.capBatch({ campaignId: "a", channel: "push", userIds: [9] }))).toEqual(["allowed"]);
    expect(kinds(await behind.capBatch({ campaignId: "b", channel: "push", userIds: [9] }))).toEqual(["capped"]);
    // a backfill a day earlier would put two sends in the window ending at the first one: capped too
    expect(kinds(await behind.capBatch({ campaignId: "c", channel: "push", userIds: [9], at: T0 + 100 }))).toEqual([
      "capped",
    ]);
    expect(kinds(await behind.capBatch({ campaignId: "d", channel: "push", userIds: [9], at: T0 + 20 }))).toEqual([
      "allowed",
    ]);
  });

  it("refuses an `at` older than the policy's longest window, naming the field", async () => {
    const { capper } = capperAt(rulesOf(simplePolicy({ push: [{ window: "7d", max: 1 }] })));
    const refused = capper.capBatch({ campaignId: "old", channel: "push", userIds: [1], at: T0 - 7 * DAY - 1 });
    await expect(refused).rejects.toBeInstanceOf(ValidationError);
    await expect(refused).rejects.toThrow(/^at: /);
    await expect(
      capper.capBatch({ campaignId: "oldest-allowed", channel: "push", userIds: [1], at: T0 - 7 * DAY }),
    ).resolves.toBeDefined();
    await expect(capper.capBatch({ campaignId: "zero", channel: "push", userIds: [1], at: 0 })).rejects.toThrow(
      /^at: /,
    );
  });
});
