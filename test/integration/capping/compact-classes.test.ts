// Page blocks with their users' class numbers at the narrowest width (format 6, CAP_COMPACT_CLASSES): what a held
// page stores and its memory, calls without the switch reading what calls with it wrote, and the coalescer
// keeping requests with different rollout switches in calls of their own.
import { decodeMulti } from "@msgpack/msgpack";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import {
  CapSendsCoalescer,
  type CapSendsRequest,
  planCapSends,
  readCapSendsReply,
  scriptProfiles,
} from "../../../functions/core/capping/cap-sends-script.ts";
import { keptHorizonMs, type Policy, parsePolicy } from "../../../functions/core/capping/policy.ts";
import { capPageKey } from "../../../sdk/src/protocol/index.ts";
import { classNumberOf, decodeBlock } from "../../support/block.ts";
import { decisionOf } from "../../support/cap-sends-runner.ts";
import { CappingModel, type ModelCall, type ModelDecision } from "../../support/capping-model.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
let store: RedisCapStore;
beforeAll(() => {
  cluster = connectCluster();
  store = new RedisCapStore(cluster);
});
afterAll(async () => {
  await cluster.quit();
});

const REDELIVERY_MS = 10 * 60_000;
const PAGE = Array.from({ length: 256 }, (_, i) => i);
const policy: Policy = parsePolicy({
  version: "compact",
  channels: ["push"],
  segments: [],
  default: { name: "all", caps: { push: [{ window: "1h", max: 50 }] } },
});
const sendCall = (now: number, campaignId: string): ModelCall => ({
  mode: "count",
  now,
  at: now,
  channel: "push",
  campaignId,
  exemptCounted: false,
  users: PAGE,
});
/** A deterministic share of the page, a different one per seed. */
const someOf = (seed: number, share: number) =>
  PAGE.filter((user) => ((Math.imul(user ^ seed, 0x2545f491) >>> 0) % 1000) / 1000 < share);

function request(call: ModelCall, held: readonly number[], compactClasses: boolean): CapSendsRequest {
  const heldSet = new Set(held);
  const sortedIds = Uint32Array.from(call.users.filter((user) => !heldSet.has(user))).sort();
  return {
    namespace: "",
    now: call.now,
    at: call.at,
    mode: call.mode,
    compactClasses,
    channel: call.channel,
    campaignId: call.campaignId,
    forced: call.exemptCounted,
    horizonMs: keptHorizonMs(policy, REDELIVERY_MS),
    profiles: scriptProfiles(policy, call.channel, REDELIVERY_MS),
    sortedIds,
    segmentOf: new Uint8Array(sortedIds.length),
    held: Uint32Array.from(heldSet).sort(),
  };
}

/** Runs `call` with `held` held; the decisions of the others, in user order. */
async function runHeld(namespace: string, call: ModelCall, held: readonly number[], compactClasses: boolean) {
  const planned = { ...request(call, held, compactClasses), namespace };
  const byUser = new Map<number, ModelDecision>();
  for (const one of planCapSends(planned)) {
    const { codes } = readCapSendsReply(await store.capSends(one.keys, one.args), one.members.length);
    one.members.forEach((member, m) => {
      byUser.set(planned.sortedIds[member] as number, decisionOf(codes[m] as number));
    });
  }
  return [...planned.sortedIds].map((user) => byUser.get(user));
}

/** The stored page block's format and class bytes. */
async function storedClasses(namespace: string): Promise<{ format: number; users: Uint8Array; classes: number }> {
  const values = [...decodeMulti((await cluster.getBuffer(capPageKey(namespace, 0))) as Buffer, { rawStrings: true })];
  return { format: values[0] as number, users: values[8] as Uint8Array, classes: (values[7] as unknown[]).length };
}

/** The class bytes' length format 6 gives a block of `classes` classes (numbers 0..classes). */
const narrowestLength = (classes: number) =>
  classes <= 1 ? 32 : classes <= 3 ? 64 : classes <= 15 ? 128 : classes <= 255 ? 256 : 512;

describe("page blocks with compact classes (CAP_COMPACT_CLASSES)", () => {
  it("stores a held page's class numbers at the narrowest width the block's classes fit, and each user's history as format 5 does", async () => {
    const [wide, narrow] = [uniqueNamespace(), uniqueNamespace()];
    const seen = new Set<number>();
    for (let i = 0; i < 24; i++) {
      // a different third of the page held at each call, so the classes multiply
      const call = sendCall(T0 + i * 1_000, `c${i}`);
      const held = someOf(i, 0.3);
      expect(await runHeld(narrow, call, held, true)).toEqual(await runHeld(wide, call, held, false));
      const stored = await storedClasses(narrow);
      expect(stored.format).toBe(6);
      expect(stored.users.length).toBe(narrowestLength(stored.classes));
      expect((await storedClasses(wide)).format).toBe(5);
      seen.add(stored.users.length);
      const blockOf = async (namespace: string) =>
        decodeBlock((await cluster.getBuffer(capPageKey(namespace, 0))) as Buffer);
      const [wideBlock, narrowBlock] = [await blockOf(wide), await blockOf(narrow)];
      for (const offset of PAGE) expect(narrowBlock.history(offset)).toEqual(wideBlock.history(offset));
    }
    expect([...seen].sort((a, b) => a - b)).toEqual([32, 64, 128, 256]);
  });

  it("keeps a held page block smaller by MEMORY USAGE than format 5 by at least the bytes its width saves", async () => {
    const [wide, narrow] = [uniqueNamespace(), uniqueNamespace()];
    // the bench's deferred campaign: about 2 users of 7 held, on empty logs (classes 0 and 1: a bit a user)
    const call = sendCall(T0, "c");
    const held = someOf(7, 2 / 7);
    await runHeld(wide, call, held, false);
    await runHeld(narrow, call, held, true);
    const usage = async (namespace: string) =>
      Number(await cluster.call("MEMORY", "USAGE", capPageKey(namespace, 0), "SAMPLES", "0"));
    const [wideBytes, narrowBytes] = [await usage(wide), await usage(narrow)];
    const stored = await storedClasses(narrow);
    expect(stored.users.length).toBe(32);
    expect(wideBytes - narrowBytes).toBeGreaterThanOrEqual(512 - 32);
  });

  it("lets calls without the switch read and decide a block written with it, and write it back as format 5", async () => {
    const namespace = uniqueNamespace();
    const model = new CappingModel(policy, () => 0, REDELIVERY_MS);
    for (let i = 0; i < 10; i++) {
      // the switch on for the first 5 calls (the block packed narrower at each write), then off
      const compactClasses = i < 5;
      const call = sendCall(T0 + i * 60_000, `c${i}`);
      const held = someOf(100 + i, 0.4);
      const heldSet = new Set(held);
      const expected = model.apply({ ...call, users: PAGE.filter((user) => !heldSet.has(user)) });
      expect(await runHeld(namespace, call, held, compactClasses)).toEqual(expected);
      expect((await storedClasses(namespace)).format).toBe(compactClasses ? 6 : 5);
    }
    const stored = await storedClasses(namespace);
    expect(stored.users.length).toBe(512);
    expect(classNumberOf(stored.users, 255)).toBeLessThanOrEqual(stored.classes);
  });

  it("never merges requests with different rollout switches into one call (the call's mode carries them)", async () => {
    // repro: the coalescer keyed on neither switch, so a merged call ran with the first request's (hotRecords included)
    const namespace = uniqueNamespace();
    const modes: string[] = [];
    const recording = {
      capSends: (keys: readonly string[], args: readonly (string | Buffer)[]) => {
        modes.push(String(args[2]));
        return store.capSends(keys, args);
      },
    };
    const coalescer = new CapSendsCoalescer(recording);
    const call = sendCall(T0, "c");
    // four requests of the same call on disjoint quarters of the page, one per combination of the switches
    const quarters = [0, 1, 2, 3].map((q) => PAGE.slice(q * 64, q * 64 + 64));
    const switches = [
      { hotRecords: false, compactClasses: false },
      { hotRecords: false, compactClasses: true },
      { hotRecords: true, compactClasses: false },
      { hotRecords: true, compactClasses: true },
    ];
    // one profiles array for all (the coalescer compares profiles by identity, as the capper makes them once)
    const { profiles } = request(call, [], false);
    const results = await Promise.all(
      quarters.map((users, q) =>
        coalescer.run({ ...request({ ...call, users }, [], false), profiles, ...switches[q], namespace }),
      ),
    );
    expect(modes.sort()).toEqual(["count", "count+compact", "count+hot", "count+hot+compact"]);
    for (const [q, { verdicts }] of results.entries()) {
      expect(
        Array.from({ length: 64 }, (_, i) => verdicts.decision(i)),
        `request ${q}`,
      ).toEqual(Array(64).fill("allowed"));
    }
  });
});
