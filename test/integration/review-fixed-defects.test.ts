// Review: defects found against the contracts of DESIGN.md and docs/api.md and fixed since, each test with
// its one-line reproduction in its first comment; they now guard those contracts.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, RedisLimitStore, type TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import type { CampaignBatchInput } from "../../functions/core/capping/campaign-batch.ts";
import { Capper } from "../../functions/core/capping/capper.ts";
import { Limiter } from "../../functions/core/limits/limiter.ts";
import { fixedClock } from "../../functions/core/shared/clock.ts";
import { ValidationError } from "../../functions/core/shared/errors.ts";
import { connectCluster, uniqueNamespace } from "../support/cluster.ts";
import { HOUR, rulesOf, T0 } from "../support/rules.ts";

const DAY = 24 * HOUR;
/** A midnight UTC ahead of the server's clock, so rate-limit states written live through the test. */
const T = Math.ceil((Date.now() + 2 * DAY) / DAY) * DAY;

let cluster: TollgateCluster;
let store: RedisCapStore;
let limitStore: RedisLimitStore;
beforeAll(() => {
  cluster = connectCluster();
  store = new RedisCapStore(cluster);
  limitStore = new RedisLimitStore(cluster, { deadlineMs: 5_000 });
});
afterAll(async () => {
  await cluster.quit();
});

type Caps = Record<string, { window: string; max: number }[]>;
const policyOf = (version: string, segmentCaps: Caps, defaultCaps: Caps) => ({
  version,
  channels: ["a", "b", "c"],
  segments: [{ name: "s", bitmap: "segments/s.roaring", caps: segmentCaps }],
  default: { name: "rest", caps: defaultCaps },
});
const limiterAt = (now: number) =>
  new Limiter({ store: limitStore, clock: fixedClock(now), namespace: uniqueNamespace() });

describe("review (fixed defects): capping", () => {
  it("recognises a batch without `at` redelivered an hour later under 1-minute caps (docs/api.md: sends kept at least one day)", async () => {
    // repro: cap a:1/1m; capBatch {k1, a, [7]} at T0, then the same message at T0 + 1h -> "allowed" again (counted twice)
    const clock = fixedClock(T0);
    const rules = rulesOf(policyOf("v", { a: [{ window: "1m", max: 1 }] }, { a: [{ window: "1m", max: 1 }] }));
    const capper = new Capper({ store, rules: () => rules, clock, namespace: uniqueNamespace() });
    const message = { campaignId: "k1", channel: "a", userIds: [7, 4096, 2 ** 32 - 1] };
    expect((await capper.capBatch(message)).decisions.map((d) => d.decision)).toEqual([
      "allowed",
      "allowed",
      "allowed",
    ]);
    clock.advance(HOUR);
    expect((await capper.capBatch(message)).decisions.map((d) => d.decision)).toEqual([
      "duplicate",
      "duplicate",
      "duplicate",
    ]);
  });

  it("recognises a dense redelivery (page block path) an hour later under 1-second caps", async () => {
    // repro: cap a:1/1s; capBatch {k1, a, 0..63} at T0, then again at T0 + 1h -> "allowed" again
    const clock = fixedClock(T0);
    const rules = rulesOf(policyOf("v", {}, { a: [{ window: "1s", max: 1 }] }));
    const capper = new Capper({ store, rules: () => rules, clock, namespace: uniqueNamespace() });
    const message = { campaignId: "k1", channel: "a", userIds: Array.from({ length: 64 }, (_, i) => i) };
    await capper.capBatch(message);
    clock.advance(HOUR);
    const again = (await capper.capBatch(message)).decisions.map((d) => d.decision);
    expect(again.filter((d) => d !== "duplicate")).toEqual([]);
  });

  it("refuses an unknown field of a campaign batch, naming it (a typo must not silently drop countExempt)", async () => {
    // repro: capBatch {..., exempt: true, countexempt: true} -> accepted, the send is not counted
    const rules = rulesOf(policyOf("v", {}, { a: [{ window: "1m", max: 1 }] }));
    const capper = new Capper({ store, rules: () => rules, clock: fixedClock(T0), namespace: uniqueNamespace() });
    const error = await capper
      .capBatch({ campaignId: "k1", channel: "a", userIds: [1], exempt: true, countexempt: true } as CampaignBatchInput)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).path).toBe("countexempt");
  });
});

describe("review (fixed defects): rate limits", () => {
  it("fixed window: after windowMs grows from 1000 to 3000, the epoch-aligned window [0, 3000) never holds more than max", async () => {
    // repro: fixed-window max 5 windowMs 1000: 5 at T+1500; windowMs 3000 at T+2000 -> allowed (10 in [T, T+3000))
    const limiter = limiterAt(T + 30 * DAY);
    const key = "grow";
    for (let i = 0; i < 5; i++) {
      expect(
        (await limiter.check({ key, algorithm: "fixed-window", max: 5, windowMs: 1000, at: T + 1500 })).allowed,
      ).toBe(true);
    }
    const after = await limiter.check({ key, algorithm: "fixed-window", max: 5, windowMs: 3000, at: T + 2000 });
    expect(after.allowed).toBe(false);
  });

  it("denies when previous × (1 − elapsed/window) + current + cost exceeds max by less than a float can see", async () => {
    // repro: sliding-window max 1e9 windowMs 1d: previous p (prime) charged, then at the elapsed time e where
    // p × (window − e) ≡ 1 (mod window), cost = max − floor(used) -> allowed though the exact sum is max + 1/window
    const window = DAY;
    const max = 1_000_000_000;
    // find p, e such that the exact weighted previous is k + 1/window and the script's doubles round it to <= k
    let found: { p: number; e: number; k: number } | undefined;
    for (let p = 999_999_001; p < 999_999_999 && !found; p += 2) {
      // e with p * (window - e) mod window = 1, i.e. p * e ≡ -1 (mod window)
      const inverse = modInverse(BigInt(p), BigInt(window));
      if (inverse === undefined) continue;
      const e = Number(((-inverse % BigInt(window)) + BigInt(window)) % BigInt(window));
      if (e <= 0) continue;
      const exact = BigInt(p) * BigInt(window - e);
      const k = Number(exact / BigInt(window));
      const asLua = (p * (window - e)) / window;
      if (asLua <= k) found = { p, e, k };
    }
    expect(found, "no float case found").toBeDefined();
    const { p, e, k } = found as { p: number; e: number; k: number };
    const limiter = limiterAt(T + 3 * DAY);
    const key = "float";
    const spec = { key, algorithm: "sliding-window", max, windowMs: window } as const;
    expect((await limiter.check({ ...spec, cost: p, at: T + DAY - 1 })).allowed).toBe(true);
    // exact: k + 1/window + (max - k) > max
    const second = await limiter.check({ ...spec, cost: max - k, at: T + DAY + e });
    expect(second.allowed).toBe(false);
  });
});

function modInverse(a: bigint, m: bigint): bigint | undefined {
  let [oldR, r] = [a % m, m];
  let [oldS, s] = [1n, 0n];
  while (r !== 0n) {
    const q = oldR / r;
    [oldR, r] = [r, oldR - q * r];
    [oldS, s] = [s, oldS - q * s];
  }
  return oldR === 1n ? ((oldS % m) + m) % m : undefined;
}
