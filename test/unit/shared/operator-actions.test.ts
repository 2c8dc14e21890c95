// The operator actions of the core (publish the rules, push a campaign) behind their own ports, held by
// plain in-memory objects: what is refused uploads or sends nothing, and what goes out goes in order.
import { describe, expect, it } from "vitest";
import { type CampaignQueue, pushCampaign } from "../../../functions/core/capping/campaign-push.ts";
import { publishPolicy, publishRules, publishSegments } from "../../../functions/core/capping/rules-publisher.ts";
import { buildSegments } from "../../../functions/core/capping/segment-builder.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { CorruptBitmapError, InvalidPolicyError, ValidationError } from "../../../functions/core/shared/errors.ts";
import type { ObjectWriter } from "../../../functions/core/shared/object-store.ts";
import { simplePolicy } from "../../support/rules.ts";

function memoryStore(): ObjectWriter & { keys: string[]; bodies: Map<string, Uint8Array | string> } {
  const keys: string[] = [];
  const bodies = new Map<string, Uint8Array | string>();
  return {
    keys,
    bodies,
    put: async (key, body) => {
      keys.push(key);
      bodies.set(key, body);
    },
  };
}

function memoryQueue(): CampaignQueue & { bodies: string[] } {
  const bodies: string[] = [];
  return {
    bodies,
    // two bodies per call, like a queue with a small batch limit
    send: async (all, onSent) => {
      for (let i = 0; i < all.length; i += 2) {
        bodies.push(...all.slice(i, i + 2));
        onSent(Math.min(i + 2, all.length));
      }
    },
  };
}

describe("publishing the rules", () => {
  it("uploads a valid policy as given, and nothing of an invalid one", async () => {
    const store = memoryStore();
    const text = JSON.stringify(simplePolicy({ push: [{ window: "1d", max: 1 }] }));
    expect((await publishPolicy(store, text, "config/other.json")).version).toBe("test.1");
    expect(store.bodies.get("config/other.json")).toBe(text);
    const bad = memoryStore();
    await expect(publishPolicy(bad, JSON.stringify({ version: "x" }))).rejects.toBeInstanceOf(InvalidPolicyError);
    expect(bad.keys).toEqual([]);
  });

  it("checks every bitmap before the first upload, naming the bad one by its source", async () => {
    const good = buildSegments([{ name: "new", userIds: [1, 2] }]).get("new") as Uint8Array;
    const store = memoryStore();
    const refused = publishSegments(store, [
      { name: "new.roaring", bytes: good },
      { name: "bad.roaring", bytes: new TextEncoder().encode("junk"), source: "build/bad.roaring" },
    ]);
    await expect(refused).rejects.toThrow(CorruptBitmapError);
    await expect(refused).rejects.toMatchObject({ path: "build/bad.roaring" });
    expect(store.keys).toEqual([]);
    expect(await publishSegments(store, [{ name: "new.roaring", bytes: good }])).toEqual([
      { key: "segments/new.roaring", bytes: good.length },
    ]);
  });

  it("uploads the bitmaps before the policy that names them", async () => {
    const store = memoryStore();
    await publishRules(store, simplePolicy({ push: [{ window: "1d", max: 1 }] }), { new: [5] });
    expect(store.keys).toEqual(["segments/new.roaring", "config/policy.json"]);
  });
});

describe("pushing a campaign", () => {
  it("refuses bad campaign fields before sending anything, naming the field", async () => {
    const queue = memoryQueue();
    const refused = pushCampaign(queue, { campaignId: "has space", channel: "push", userIds: [1] });
    await expect(refused).rejects.toBeInstanceOf(ValidationError);
    await expect(refused).rejects.toMatchObject({ path: "campaignId" });
    expect(queue.bodies).toEqual([]);
  });

  it("splits the users into messages in order and reports the users sent", async () => {
    const queue = memoryQueue();
    const progress: number[] = [];
    const messages = await pushCampaign(queue, {
      campaignId: "c1",
      channel: "push",
      userIds: [1, 2, 3, 4, 5, 6, 7],
      payload: { template: "t" },
      usersPerMessage: 3,
      onProgress: (sent) => progress.push(sent),
    });
    expect(messages).toBe(3);
    expect(queue.bodies.map((body) => JSON.parse(body))).toEqual([
      { campaignId: "c1", channel: "push", userIds: [1, 2, 3], payload: { template: "t" } },
      { campaignId: "c1", channel: "push", userIds: [4, 5, 6], payload: { template: "t" } },
      { campaignId: "c1", channel: "push", userIds: [7], payload: { template: "t" } },
    ]);
    expect(progress).toEqual([6, 7]);
  });
});

describe("pushing a campaign against the policy in service", () => {
  const policy = { version: "p.1", channels: ["push", "email"], backfillMs: 7 * 86_400_000 };
  const now = 1_795_000_000_000;
  const inService = { policy, clock: fixedClock(now) };
  const push = (fields: { channel: string; at?: number }) =>
    pushCampaign(memoryQueue(), { campaignId: "c1", userIds: [1], ...fields }, inService);

  it("refuses a channel the policy does not list, naming the channel and the policy's channels", async () => {
    await expect(push({ channel: "sms" })).rejects.toMatchObject({
      path: "channel",
      message: 'channel: unknown channel "sms" (policy p.1 has push, email)',
    });
  });

  it("takes `at` up to exactly 5 minutes ahead and back to exactly the longest window, refuses 1 ms past either", async () => {
    expect(await push({ channel: "push", at: now + 5 * 60_000 })).toBe(1);
    expect(await push({ channel: "push", at: now - policy.backfillMs })).toBe(1);
    await expect(push({ channel: "push", at: now + 5 * 60_000 + 1 })).rejects.toMatchObject({ path: "at" });
    await expect(push({ channel: "push", at: now - policy.backfillMs - 1 })).rejects.toMatchObject({ path: "at" });
  });

  it("sends nothing when the policy refuses", async () => {
    const queue = memoryQueue();
    const refused = pushCampaign(queue, { campaignId: "c1", channel: "fax", userIds: [1, 2] }, inService);
    await expect(refused).rejects.toBeInstanceOf(ValidationError);
    expect(queue.bodies).toEqual([]);
  });
});
