// The capping engine against the real local Redis Cluster: exact rolling windows, idempotency, atomicity.
import calculateSlot from "cluster-key-slot";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tollgateLibrary } from "../../../functions/adapters/lua-scripts.ts";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import type { CampaignBatchInput } from "../../../functions/core/capping/campaign-batch.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import type { CapBatchResult } from "../../../functions/core/capping/decisions.ts";
import type { Rules } from "../../../functions/core/capping/rules-source.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { StoreReplyError, ValidationError } from "../../../functions/core/shared/errors.ts";
import {
  capBlobKey,
  capIdentityKey,
  capPageKey,
  capRecordKey,
  capTagOf,
  loadLibrary,
  pageOf,
  recordRangeOf,
  USERS_PER_GROUP,
} from "../../../sdk/src/protocol/index.ts";
import { decodeBlock, decodeRecord, readUserRecord } from "../../support/block.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { rejectionOf } from "../../support/rejection.ts";
import { DAY, HOUR, rulesOf, simplePolicy, T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

/** A capper whose clock reads each batch's `at` (a campaign decided as it is sent). */
function capperFor(rules: ReturnType<typeof rulesOf>, namespace = uniqueNamespace()) {
  const clock = fixedClock(T0);
  const capper = new Capper({ store: new RedisCapStore(cluster), rules: () => rules, clock, namespace });
  const atItsTime =
    (decide: (input: CampaignBatchInput) => Promise<CapBatchResult>) =>
    (input: CampaignBatchInput): Promise<CapBatchResult> => {
      if (input.at !== undefined) clock.set(input.at);
      return decide(input);
    };
  return { capBatch: atItsTime((input) => capper.capBatch(input)), peek: atItsTime((input) => capper.peek(input)) };
}

/** A capper on a fixed clock (at T0) that the test moves itself, reading its rules from `rules`. */
function clockedCapper(rules: () => Rules, options: { namespace?: string; redeliveryMs?: number } = {}) {
  const clock = fixedClock(T0);
  const { namespace = uniqueNamespace(), redeliveryMs } = options;
  const capper = new Capper({
    store: new RedisCapStore(cluster),
    rules,
    clock,
    namespace,
    ...(redeliveryMs === undefined ? {} : { redeliveryMs }),
  });
  return { capper, clock };
}

const kinds = (result: CapBatchResult) => result.decisions.map((d) => d.decision);
const at = (day: number, hour: number, minute = 0) => T0 + day * DAY + hour * HOUR + minute * 60_000;

describe("capping engine on the cluster", () => {
  it("follows the rolling 24h window exactly (cap 3 per 24h)", async () => {
    const capper = capperFor(rulesOf(simplePolicy({ push: [{ window: "24h", max: 3 }] })));
    const send = async (label: string, time: number) =>
      (await capper.capBatch({ campaignId: label, channel: "push", userIds: [42], at: time })).decisions[0]!;
    expect((await send("d1-0900", at(0, 9))).decision).toBe("allowed");
    expect((await send("d1-1300", at(0, 13))).decision).toBe("allowed");
    expect((await send("d1-1700", at(0, 17))).decision).toBe("allowed");
    const capped = await send("d2-0800", at(1, 8));
    expect(capped.decision).toBe("capped");
    expect(capped.cap).toEqual({ channel: "push", window: "24h", windowMs: DAY, max: 3 });
    expect((await send("d2-0901", at(1, 9, 1))).decision).toBe("allowed"); // 09:00 aged out
    expect((await send("d2-1000", at(1, 10))).decision).toBe("capped");
    expect((await send("d2-1100", at(1, 11))).decision).toBe("capped");
    expect((await send("d2-1400", at(1, 14))).decision).toBe("allowed"); // 13:00 aged out
  });

  it("counts a send at exactly now - window as outside the window, and one at now as inside", async () => {
    const capper = capperFor(rulesOf(simplePolicy({ push: [{ window: "1h", max: 1 }] })));
    await capper.capBatch({ campaignId: "a", channel: "push", userIds: [1], at: at(0, 10) });
    expect(kinds(await capper.peek({ campaignId: "b", channel: "push", userIds: [1], at: at(0, 11) - 1 }))).toEqual([
      "capped",
    ]);
    expect(kinds(await capper.peek({ campaignId: "b", channel: "push", userIds: [1], at: at(0, 11) }))).toEqual([
      "allowed",
    ]);
  });

  it("applies day and week caps together: a week of daily campaigns allows exactly 3", async () => {
    const capper = capperFor(
      rulesOf(
        simplePolicy({
          push: [
            { window: "1d", max: 1 },
            { window: "7d", max: 3 },
          ],
        }),
      ),
    );
    const users = [7, 8, 9];
    const perDay: string[][] = [];
    for (let day = 0; day < 7; day++) {
      const result = await capper.capBatch({
        campaignId: `daily-${day}`,
        channel: "push",
        userIds: users,
        at: at(day, 10),
      });
      perDay.push(kinds(result));
    }
    expect(perDay.map((d) => d[0])).toEqual(["allowed", "allowed", "allowed", "capped", "capped", "capped", "capped"]);
    expect(perDay.every((d) => d.every((k) => k === d[0]))).toBe(true);
    // a second campaign the same day is stopped by the day cap first
    const sameDay = await capper.capBatch({ campaignId: "extra", channel: "push", userIds: [7], at: at(0, 12) });
    expect(sameDay.decisions[0]!.cap?.window).toBe("1d");
    // day 7 10:00: the day-0 send has left the week
    expect(
      kinds(await capper.capBatch({ campaignId: "daily-7", channel: "push", userIds: users, at: at(7, 10) })),
    ).toEqual(["allowed", "allowed", "allowed"]);
  });

  it("counts every channel's sends in '*' caps and only its own in a channel's caps", async () => {
    const capper = capperFor(
      rulesOf(simplePolicy({ push: [{ window: "1d", max: 1 }], "*": [{ window: "1d", max: 2 }] })),
    );
    const send = async (campaignId: string, channel: string) =>
      (await capper.capBatch({ campaignId, channel, userIds: [5], at: at(0, 9) })).decisions[0]!;
    expect((await send("e1", "email")).decision).toBe("allowed");
    expect((await send("p1", "push")).decision).toBe("allowed"); // email does not count in push's own cap
    const push2 = await send("p2", "push");
    expect([push2.decision, push2.cap?.channel]).toEqual(["capped", "push"]);
    const sms = await send("s1", "sms"); // sms has only the "*" cap, which email + push filled
    expect([sms.decision, sms.cap?.channel]).toEqual(["capped", "*"]);
  });

  it("applies each segment's own caps within one call", async () => {
    const capper = capperFor(
      rulesOf(simplePolicy({ push: [{ window: "1d", max: 2 }] }, { push: [{ window: "1d", max: 0 }] }), { new: [100] }),
    );
    const result = await capper.capBatch({ campaignId: "c", channel: "push", userIds: [100, 101], at: at(0, 9) });
    expect(result.decisions.map((d) => `${d.segment}:${d.decision}`)).toEqual(["new:allowed", "unsegmented:capped"]);
    expect(result.totals).toEqual({
      new: { allowed: 1, capped: 0, duplicate: 0, exempt: 0, cappedBy: {} },
      unsegmented: { allowed: 0, capped: 1, duplicate: 0, exempt: 0, cappedBy: { "push:1d": 1 } },
    });
  });

  it("gives the same decisions and counts when the same batch is processed twice", async () => {
    const capper = capperFor(rulesOf(simplePolicy({ push: [{ window: "1d", max: 1 }] })));
    const users = Array.from({ length: 3000 }, (_, i) => i * 7);
    await capper.capBatch({
      campaignId: "earlier",
      channel: "push",
      userIds: users.filter((u) => u % 2 === 0),
      at: at(0, 8),
    });
    const batch = { campaignId: "spring", channel: "push", userIds: users, at: at(0, 9) };
    const first = await capper.capBatch(batch);
    const second = await capper.capBatch({ ...batch, at: at(0, 9, 30) });
    // a counted send comes back as a duplicate (still forwarded); a capped one stays capped
    const forwarded = (r: CapBatchResult) => r.decisions.filter((d) => d.decision !== "capped").map((d) => d.userId);
    expect(forwarded(second)).toEqual(forwarded(first));
    expect(first.totals.unsegmented).toMatchObject({ allowed: 1500, capped: 1500, duplicate: 0 });
    expect(second.totals.unsegmented).toMatchObject({ allowed: 0, capped: 1500, duplicate: 1500 });
    // counted once: with cap 1/day, any other campaign is now capped for everyone
    const other = await capper.peek({ campaignId: "other", channel: "push", userIds: users, at: at(0, 10) });
    expect(other.totals.unsegmented).toMatchObject({ allowed: 0, capped: 3000 });
  });

  it("decides a repeated user ID once within a batch", async () => {
    const capper = capperFor(rulesOf(simplePolicy({ push: [{ window: "1d", max: 5 }] })));
    const result = await capper.capBatch({ campaignId: "c", channel: "push", userIds: [3, 4, 3, 3], at: at(0, 9) });
    expect(kinds(result)).toEqual(["allowed", "allowed", "duplicate", "duplicate"]);
  });

  it("allows exactly one send per user under 8 concurrent batches with cap 1/day", async () => {
    const capper = capperFor(rulesOf(simplePolicy({ push: [{ window: "1d", max: 1 }] })));
    const batches = Array.from({ length: 8 }, (_, b) =>
      Array.from({ length: 2000 }, (_, i) => (i * 3 + b * 250) % 4000),
    );
    const results = await Promise.all(
      batches.map((userIds, b) => capper.capBatch({ campaignId: `race-${b}`, channel: "push", userIds, at: at(0, 9) })),
    );
    const allowedPerUser = new Map<number, number>();
    for (const result of results) {
      for (const d of result.decisions) {
        if (d.decision === "allowed") allowedPerUser.set(d.userId, (allowedPerUser.get(d.userId) ?? 0) + 1);
      }
    }
    const everyone = new Set(batches.flat());
    expect(allowedPerUser.size).toBe(everyone.size);
    expect([...allowedPerUser.values()].every((n) => n === 1)).toBe(true);
  });

  it("decides a batch spanning every node the same as one user at a time", async () => {
    const users = Array.from({ length: 600 }, (_, i) => (i * 2_654_435_761) % 4_294_967_296);
    const rules = rulesOf(
      simplePolicy(
        {
          push: [
            { window: "1d", max: 1 },
            { window: "7d", max: 2 },
          ],
          "*": [{ window: "7d", max: 2 }],
        },
        { push: [{ window: "1d", max: 2 }] },
      ),
      { new: users.filter((_, i) => i % 2 === 0) },
    );
    const primaries = new Set(users.map((u) => cluster.slots[calculateSlot(capPageKey("tg", pageOf(u)))]![0]));
    expect(primaries.size).toBe(3);
    // the same history in two namespaces, then the same campaign: batched in one, user by user in the other
    const batched = capperFor(rules);
    const single = capperFor(rules);
    for (const capper of [batched, single]) {
      for (let day = 0; day < 3; day++) {
        const userIds = users.filter((_, i) => (i + day) % 3 !== 0);
        await capper.capBatch({
          campaignId: `h${day}`,
          channel: day === 1 ? "email" : "push",
          userIds,
          at: at(day, 9),
        });
      }
    }
    const batch = { campaignId: "final", channel: "push", userIds: users, at: at(2, 15) };
    const together = await batched.capBatch(batch);
    const alone = [];
    for (const userId of users) alone.push((await single.capBatch({ ...batch, userIds: [userId] })).decisions[0]);
    expect(together.decisions).toEqual(alone);
    // users i = 0, 1, 2 (mod 3) had email+push, push+email, push+push: three different outcomes in "new"
    const outcomes = new Set(
      together.decisions.map((d) => `${d.segment}:${d.decision}:${d.cap ? `${d.cap.channel}:${d.cap.window}` : ""}`),
    );
    expect(outcomes).toEqual(new Set(["new:capped:push:1d", "new:capped:*:7d", "unsegmented:allowed:"]));
  });

  it("peeks without changing anything", async () => {
    const capper = capperFor(rulesOf(simplePolicy({ push: [{ window: "1d", max: 1 }] })));
    const batch = { campaignId: "c", channel: "push", userIds: [1, 2], at: at(0, 9) };
    expect(kinds(await capper.peek(batch))).toEqual(["allowed", "allowed"]);
    expect(kinds(await capper.peek(batch))).toEqual(["allowed", "allowed"]);
    expect(kinds(await capper.capBatch(batch))).toEqual(["allowed", "allowed"]);
    expect(kinds(await capper.peek(batch))).toEqual(["duplicate", "duplicate"]);
    expect(kinds(await capper.peek({ ...batch, campaignId: "d" }))).toEqual(["capped", "capped"]);
  });

  it("skips the caps for exempt sends and counts them only with countExempt", async () => {
    const capper = capperFor(rulesOf(simplePolicy({ push: [{ window: "1d", max: 1 }] })));
    const base = { channel: "push", userIds: [9], at: at(0, 9) };
    expect(kinds(await capper.capBatch({ ...base, campaignId: "a" }))).toEqual(["allowed"]);
    expect(kinds(await capper.capBatch({ ...base, campaignId: "otp-1", exempt: true }))).toEqual(["exempt"]);
    expect(kinds(await capper.capBatch({ ...base, campaignId: "otp-2", exempt: true, countExempt: true }))).toEqual([
      "exempt",
    ]);
    expect(kinds(await capper.capBatch({ ...base, campaignId: "otp-2", exempt: true, countExempt: true }))).toEqual([
      "duplicate",
    ]);
    // the counted exempt send fills the next day's cap along with "a"... only within the day: check 2/day
    const wide = capperFor(rulesOf(simplePolicy({ push: [{ window: "1d", max: 2 }] })));
    await wide.capBatch({ ...base, campaignId: "a" });
    await wide.capBatch({ ...base, campaignId: "otp", exempt: true });
    expect(kinds(await wide.peek({ ...base, campaignId: "b" }))).toEqual(["allowed"]);
    await wide.capBatch({ ...base, campaignId: "otp-counted", exempt: true, countExempt: true });
    expect(kinds(await wide.peek({ ...base, campaignId: "b" }))).toEqual(["capped"]);
  });

  it("keeps a user's record only as long as a valid decision can need it, and expires the key then", async () => {
    const namespace = uniqueNamespace();
    const capper = capperFor(rulesOf(simplePolicy({ push: [{ window: "2d", max: 1 }] })), namespace);
    const user = 12_345;
    const key = capBlobKey(namespace, capTagOf(user), recordRangeOf(user));
    await capper.capBatch({ campaignId: "old", channel: "push", userIds: [user], at: at(0, 9) });
    // retention: a backfill may be 2 days old and its window reaches 2 days further; plus the 5-minute skew bound
    const retention = 4 * DAY + 5 * 60_000;
    const ttl = await cluster.pttl(key);
    expect(ttl).toBeGreaterThan(retention - 60_000);
    expect(ttl).toBeLessThanOrEqual(retention);
    await capper.capBatch({ campaignId: "mid", channel: "push", userIds: [user], at: at(1, 9) });
    const kept = decodeRecord((await readUserRecord(cluster, namespace, user))!);
    expect(kept.map((send) => send.at)).toEqual([at(0, 9)]); // "mid" was capped; "old" is still within reach
    await capper.capBatch({ campaignId: "new", channel: "push", userIds: [user], at: at(5, 9) });
    const record = decodeRecord((await readUserRecord(cluster, namespace, user))!);
    expect(record.map((send) => send.at)).toEqual([at(5, 9)]);
  });

  it("compacts a block: expired events and unused identities go, counts stay exact", async () => {
    const namespace = uniqueNamespace();
    const capper = capperFor(rulesOf(simplePolicy({ push: [{ window: "1d", max: 2 }] })), namespace);
    const users = Array.from({ length: 128 }, (_, i) => i);
    for (let c = 0; c < 100; c++) {
      // two campaigns every 12 hours: each user's day always holds the latest two
      const result = await capper.capBatch({
        campaignId: `camp-${c}`,
        channel: "push",
        userIds: users,
        at: at(0, 12 * c),
      });
      expect(result.totals.unsegmented).toMatchObject({ allowed: 128 });
    }
    const block = decodeBlock((await cluster.getBuffer(capPageKey(namespace, 0)))!);
    expect(block.events.length).toBeLessThan(block.compactAt);
    expect(block.compactAt).toBeLessThanOrEqual(32);
    expect(block.identities.length).toBeLessThanOrEqual(block.events.length);
    expect(block.width).toBe(1);
    // sends older than the retention (2 days and 5 minutes) are gone from the history
    expect(block.history(0).length).toBeLessThanOrEqual(block.events.length);
    expect(block.history(0).slice(-2)).toEqual(["push:camp-98", "push:camp-99"]);
    expect(block.history(0)).not.toContain("push:camp-0");
    expect(
      kinds(await capper.capBatch({ campaignId: "camp-99", channel: "push", userIds: [0], at: at(0, 12 * 99 + 1) })),
    ).toEqual(["duplicate"]);
    expect(
      kinds(await capper.capBatch({ campaignId: "one-more", channel: "push", userIds: [0], at: at(0, 12 * 99 + 1) })),
    ).toEqual(["capped"]);
  });

  it("decides users at the top of the ID range", async () => {
    const capper = capperFor(rulesOf(simplePolicy({ push: [{ window: "1d", max: 1 }] })));
    const users = [0, 4_294_967_295, 4_294_967_294, USERS_PER_GROUP - 1, USERS_PER_GROUP];
    expect(kinds(await capper.capBatch({ campaignId: "c", channel: "push", userIds: users, at: at(0, 9) }))).toEqual(
      Array(5).fill("allowed"),
    );
    expect(kinds(await capper.capBatch({ campaignId: "d", channel: "push", userIds: users, at: at(0, 9) }))).toEqual(
      Array(5).fill("capped"),
    );
  });

  it("recognises a batch without `at` redelivered an hour later under 1-minute caps when the queue can redeliver for an hour, from the idempotency tail", async () => {
    const namespace = uniqueNamespace();
    const rules = rulesOf(simplePolicy({ push: [{ window: "1m", max: 1 }] }));
    const { capper, clock } = clockedCapper(() => rules, { namespace, redeliveryMs: HOUR });
    const message = { campaignId: "k1", channel: "push", userIds: [7, 4096, 2 ** 32 - 1] };
    expect(kinds(await capper.capBatch(message))).toEqual(["allowed", "allowed", "allowed"]);
    // 10 minutes on, past what a 1-minute window needs (1m backfill + 1m + 5m skew): writing user 7 again
    // moves k1 out of its window part into the tail, kept for idempotency only
    clock.advance(10 * 60_000);
    expect(kinds(await capper.capBatch({ ...message, campaignId: "k2", userIds: [7] }))).toEqual(["allowed"]);
    const record = decodeRecord((await readUserRecord(cluster, namespace, 7))!);
    expect(record.map((send) => [send.at, send.part])).toEqual([
      [T0 + 10 * 60_000, "window"],
      [T0, "tail"],
    ]);
    clock.set(T0 + HOUR);
    expect(kinds(await capper.capBatch(message))).toEqual(["duplicate", "duplicate", "duplicate"]);
  });

  it("recognises a batch redelivered at once as duplicate on a channel its segment does not cap", async () => {
    // no cap of the segment reaches push, so no window around `at` reads the user's sends: the duplicate
    // must still be found in the record, on the record path as on the block path (a user with a record)
    const rules = rulesOf({
      version: "v1",
      channels: ["email", "push"],
      segments: [],
      default: { name: "rest", caps: { email: [{ window: "1d", max: 1 }] } },
    });
    const capper = capperFor(rules);
    const sparse = { campaignId: "k1", channel: "push", userIds: [5], at: at(0, 9) };
    expect(kinds(await capper.capBatch(sparse))).toEqual(["allowed"]);
    expect(kinds(await capper.capBatch(sparse))).toEqual(["duplicate"]);
    // the same campaign reaching the whole page densely: user 5 (counted in its record) is a duplicate
    const page = Array.from({ length: 32 }, (_, i) => i);
    const dense = kinds(await capper.capBatch({ ...sparse, userIds: page }));
    expect(dense[5]).toBe("duplicate");
    expect(dense.filter((kind) => kind === "allowed")).toHaveLength(31);
    expect(kinds(await capper.capBatch({ ...sparse, userIds: page }))).toEqual(Array(32).fill("duplicate"));
  });

  it("drops a campaign ID from the tag's identity table once no kept send can name it, a new ID per check for 2.8 hours", async () => {
    const rules = rulesOf(simplePolicy({ push: [{ window: "1m", max: 5 }] }));
    const namespace = uniqueNamespace();
    const redeliveryMs = 10 * 60_000;
    const { capper, clock } = clockedCapper(() => rules, { namespace, redeliveryMs });
    // 20 users of one tag, one check every 10 s, each with a campaign ID of its own
    const checks = 1_000;
    for (let i = 0; i < checks; i++) {
      clock.advance(10_000);
      const check = await capper.checkUser({ userId: 1_000 + (i % 20), channel: "push", campaignId: `msg-${i}` });
      expect(check.decision).toBe("allowed");
    }
    // the last check's ID is still a duplicate; the first one's sends are kept by nothing (2.8 hours ago)
    expect(
      (
        await capper.checkUser({
          userId: 1_000 + ((checks - 1) % 20),
          channel: "push",
          campaignId: `msg-${checks - 1}`,
        })
      ).decision,
    ).toBe("duplicate");
    const table = capIdentityKey(namespace, capTagOf(1_000));
    expect(await cluster.hexists(table, "i:push:msg-0")).toBe(0);
    expect(await cluster.hexists(table, `i:push:msg-${checks - 1}`)).toBe(1);
    // an identity lives while a kept send may name it (1m backfill + the bound + 5m skew, plus the 6-minute
    // margin), and the sweep comes round within about half the live numbers: 3 fields each, and a few more
    const lives = (60_000 + redeliveryMs + 5 * 60_000 + 6 * 60_000) / 10_000;
    const fields = await cluster.hlen(table);
    expect(fields).toBeLessThanOrEqual(3 * Math.ceil(1.6 * lives) + 8);
    expect(fields).toBeGreaterThanOrEqual(3 * (lives - 1));
  }, 60_000);

  it("keeps a named send for the redelivery bound and no longer: 1m backfill + the bound + 5m skew after its time", async () => {
    const rules = rulesOf(simplePolicy({ push: [{ window: "1m", max: 1 }] }));
    const { capper, clock } = clockedCapper(() => rules, { redeliveryMs: HOUR });
    const message = { campaignId: "k1", channel: "push", userIds: [7] };
    const kept = 60_000 + HOUR + 5 * 60_000;
    expect(kinds(await capper.capBatch(message))).toEqual(["allowed"]);
    clock.set(T0 + 20 * 60_000);
    expect(kinds(await capper.capBatch({ ...message, campaignId: "k2" }))).toEqual(["allowed"]);
    clock.set(T0 + kept - 1);
    expect(kinds(await capper.peek(message))).toEqual(["duplicate"]);
    // past the promise: the message would be counted again (the delivery side still drops it by dedupe id)
    clock.set(T0 + kept);
    expect(kinds(await capper.peek(message))).toEqual(["allowed"]);
  });

  it("counts a user's older sends in a lengthened window an hour after the change, on the record path as on the block path", async () => {
    // 1 per 1s; k1 at T0 and k2 at T0+6m (the second write moves k1 to the record's tail); the policy becomes
    // 2 per 1d; k3 an hour later must be capped: the day window holds k1 and k2 (20 dense users: block path)
    const short = rulesOf(simplePolicy({ push: [{ window: "1s", max: 1 }] }));
    const long = rulesOf(simplePolicy({ push: [{ window: "1d", max: 2 }] }));
    let rules = short;
    const { capper, clock } = clockedCapper(() => rules);
    const dense = Array.from({ length: 20 }, (_, i) => 5_120 + i);
    const send = async (campaignId: string) => {
      const one = await capper.capBatch({ campaignId, channel: "push", userIds: [7] });
      const block = await capper.capBatch({ campaignId, channel: "push", userIds: dense });
      return { sparse: one.decisions[0]?.decision, dense: [...new Set(block.decisions.map((d) => d.decision))] };
    };
    expect(await send("k1")).toEqual({ sparse: "allowed", dense: ["allowed"] });
    clock.advance(6 * 60_000);
    expect(await send("k2")).toEqual({ sparse: "allowed", dense: ["allowed"] });
    rules = long;
    clock.advance(HOUR);
    expect(await send("k3")).toEqual({ sparse: "capped", dense: ["capped"] });
  });

  it("reads a user record of the format before the idempotency tail, in the record hash of the layout before the blobs, and moves it into the blob", async () => {
    const namespace = uniqueNamespace();
    const capper = capperFor(rulesOf(simplePolicy({ push: [{ window: "1d", max: 2 }] })), namespace);
    const user = 4242;
    const key = capRecordKey(namespace, capTagOf(user), recordRangeOf(user));
    await capper.capBatch({ campaignId: "k1", channel: "push", userIds: [user], at: at(0, 9) });
    await capper.capBatch({ campaignId: "k2", channel: "push", userIds: [user], at: at(0, 8) });
    const numbers = decodeRecord((await readUserRecord(cluster, namespace, user))!).map((send) => send.identityNumber);
    // the same two sends as the old format stored them: 6-byte time + varint number, k1 first (write order)
    const old = Buffer.alloc(14);
    old.writeUIntBE(at(0, 9), 0, 6);
    old[6] = numbers[1] as number;
    old.writeUIntBE(at(0, 8), 7, 6);
    old[13] = numbers[0] as number;
    // as an upgrade finds it: no blob, the record a field of the range's hash
    await cluster.del(capBlobKey(namespace, capTagOf(user), recordRangeOf(user)));
    await cluster.hset(key, String(user), old);
    expect(decodeRecord(old).map((send) => send.at)).toEqual([at(0, 9), at(0, 8)]);
    expect(kinds(await capper.capBatch({ campaignId: "k1", channel: "push", userIds: [user], at: at(0, 9) }))).toEqual([
      "duplicate",
    ]);
    expect(kinds(await capper.capBatch({ campaignId: "k3", channel: "push", userIds: [user], at: at(0, 10) }))).toEqual(
      ["capped"],
    );
    // a write rewrites it in the new format, in time order
    await capper.capBatch({ campaignId: "k4", channel: "push", userIds: [user], at: at(1, 10) });
    const rewritten = decodeRecord((await readUserRecord(cluster, namespace, user))!);
    expect(await cluster.hexists(key, String(user))).toBe(0);
    expect(rewritten.map((send) => [send.at, send.part])).toEqual([
      [at(0, 8), "window"],
      [at(0, 9), "window"],
      [at(1, 10), "window"],
    ]);
  });

  it("a single-user check writes a user not in a blob as a field of its range's hash, and a campaign call moves it into the blob", async () => {
    const namespace = uniqueNamespace();
    const rules = rulesOf(simplePolicy({ push: [{ window: "1d", max: 2 }] }));
    const { capper, clock } = clockedCapper(() => rules, { namespace });
    const user = 7_777;
    const hash = capRecordKey(namespace, capTagOf(user), recordRangeOf(user));
    const blob = capBlobKey(namespace, capTagOf(user), recordRangeOf(user));
    expect((await capper.checkUser({ userId: user, channel: "push", campaignId: "c1" })).allowed).toBe(true);
    // the check's record is a hash field: no blob was written for it
    expect(await cluster.hexists(hash, String(user))).toBe(1);
    expect(await cluster.exists(blob)).toBe(0);
    // a campaign call reaching the user moves its record into the blob, keeping the send counted
    clock.advance(HOUR);
    expect(kinds(await capper.capBatch({ campaignId: "c2", channel: "push", userIds: [user] }))).toEqual(["allowed"]);
    expect(await cluster.hexists(hash, String(user))).toBe(0);
    expect(await cluster.exists(blob)).toBe(1);
    expect(decodeRecord((await readUserRecord(cluster, namespace, user))!).map((send) => send.at)).toEqual([
      T0,
      T0 + HOUR,
    ]);
    // a user in a blob stays there when checked; both earlier sends still count
    clock.advance(HOUR);
    expect((await capper.checkUser({ userId: user, channel: "push", campaignId: "c3" })).decision).toBe("capped");
    expect(await cluster.hexists(hash, String(user))).toBe(0);
  });

  it("recognises a dense redelivery (page block path) an hour later under 1-second caps when the queue can redeliver for an hour", async () => {
    const rules = rulesOf(simplePolicy({}, { push: [{ window: "1s", max: 1 }] }));
    const { capper, clock } = clockedCapper(() => rules, { redeliveryMs: HOUR });
    const message = { campaignId: "k1", channel: "push", userIds: Array.from({ length: 64 }, (_, i) => i) };
    expect(kinds(await capper.capBatch(message))).toEqual(Array(64).fill("allowed"));
    clock.advance(HOUR);
    expect(kinds(await capper.capBatch(message))).toEqual(Array(64).fill("duplicate"));
  });

  it("refuses an unknown field of a campaign batch, naming it (a typo must not silently drop countExempt)", async () => {
    const capper = capperFor(rulesOf(simplePolicy({ push: [{ window: "1m", max: 1 }] })));
    const error = await capper
      .capBatch({
        campaignId: "k1",
        channel: "push",
        userIds: [1],
        exempt: true,
        countexempt: true,
      } as CampaignBatchInput)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).path).toBe("countexempt");
  });

  it("says a capped check's retryAfterMs at the first time the same check has room (sends stamped ahead of now)", async () => {
    const rules = rulesOf(simplePolicy({ push: [{ window: "1m", max: 2 }] }));
    const { capper, clock } = clockedCapper(() => rules);
    for (const [campaignId, offset] of [
      ["k1", -40_000],
      ["k2", 10_000],
      ["k3", 30_000],
    ] as const) {
      const sent = await capper.capBatch({ campaignId, channel: "push", userIds: [21], at: T0 + offset });
      expect(sent.decisions[0]?.decision).toBe("allowed");
    }
    const capped = await capper.checkUser({ userId: 21, channel: "push", consume: false });
    expect(capped.allowed).toBe(false);
    clock.advance((capped.retryAfterMs as number) - 1);
    expect((await capper.checkUser({ userId: 21, channel: "push", consume: false })).allowed).toBe(false);
    clock.advance(1);
    expect((await capper.checkUser({ userId: 21, channel: "push", consume: false })).allowed).toBe(true);
  });

  it("answers peeks (a campaign peek and a check with consume: false, page block and user record) on a node past maxmemory, where a counted send is refused (OOM)", async () => {
    const rules = rulesOf(simplePolicy({ push: [{ window: "1d", max: 2 }] }));
    const { capper } = clockedCapper(() => rules);
    const dense = Array.from({ length: 256 }, (_, i) => 512 + i); // a whole page: its block
    await capper.capBatch({ campaignId: "c1", channel: "push", userIds: dense });
    await capper.checkUser({ userId: 77, channel: "push" }); // a user record
    await loadLibrary(cluster, tollgateLibrary);
    const primaries = cluster.nodes("master");
    const before = await Promise.all(primaries.map((node) => node.config("GET", "maxmemory") as Promise<string[]>));
    try {
      await Promise.all(primaries.map((node) => node.config("SET", "maxmemory", "1")));
      const peeked = await capper.peek({ campaignId: "c2", channel: "push", userIds: [512, 700, 77, 9_000_000] });
      expect(kinds(peeked)).toEqual(["allowed", "allowed", "allowed", "allowed"]);
      const check = await capper.checkUser({ userId: 77, channel: "push", consume: false });
      expect(check.allowed).toBe(true);
      expect(check.windows?.[0]?.used).toBe(1);
      const counted = await rejectionOf(capper.checkUser({ userId: 77, channel: "push" }));
      expect(counted).toBeInstanceOf(StoreReplyError);
      expect(counted.message).toContain("OOM");
    } finally {
      await Promise.all(primaries.map((node, i) => node.config("SET", "maxmemory", before[i]![1]!)));
    }
  });
});
