// Capping after a policy change (docs/decisions/0009-retention-and-ttls-from-the-clock.md): a lengthened window counts the older
// sends, on the record path as on the block path.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import type { Rules } from "../../../functions/core/capping/rules-source.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { HOUR, rulesOf, T0 } from "../../support/rules.ts";

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

describe("review: capping after a policy change (docs/DECISIONS.md 'A policy change')", () => {
  it("counts a user's older sends in a lengthened window an hour after the change, on the record path as on the block path", async () => {
    // 1 per 1s; campaigns k1 at T0 and k2 at T0+6m (the second write moves k1 out of the record's window
    // part); policy becomes 2 per 1d; k3 at T0+1h6m: the day window holds k1 and k2, so k3 must be capped.
    // The 20 dense users (block path) get the same sends as the control.
    const short = policyWith("v1", { push: [{ window: "1s", max: 1 }] });
    const long = policyWith("v2", { push: [{ window: "1d", max: 2 }] });
    let rules: Rules = short;
    const clock = fixedClock(T0);
    const capper = new Capper({ store, rules: () => rules, clock, namespace: uniqueNamespace() });
    const sparse = 7;
    const dense = Array.from({ length: 20 }, (_, i) => 5_120 + i);
    const send = async (campaignId: string) => {
      const one = await capper.capBatch({ campaignId, channel: "push", userIds: [sparse] });
      const block = await capper.capBatch({ campaignId, channel: "push", userIds: dense });
      return { sparse: one.decisions[0]?.decision, dense: [...new Set(block.decisions.map((d) => d.decision))] };
    };
    expect(await send("k1")).toEqual({ sparse: "allowed", dense: ["allowed"] });
    clock.advance(6 * MINUTE);
    expect(await send("k2")).toEqual({ sparse: "allowed", dense: ["allowed"] });
    clock.advance(1_000);
    rules = long;
    clock.advance(HOUR);
    expect(await send("k3")).toEqual({ sparse: "capped", dense: ["capped"] });
  });
});
