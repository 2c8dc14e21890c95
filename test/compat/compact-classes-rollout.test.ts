// v0.2.0's cap-sends beside the current one on page blocks: with CAP_COMPACT_CLASSES off the current script
// writes what v0.2.0 reads; with it on, v0.2.0 refuses the format-6 block (an error, never a misread), which is
// why the switch waits until no function of an earlier release runs.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import { parsePolicy } from "../../functions/core/capping/policy.ts";
import { type CapSendsCall, previousScript, REDELIVERY_MS, runScript, type Step } from "../support/cap-sends-runner.ts";
import { CappingModel } from "../support/capping-model.ts";
import { connectCluster, uniqueNamespace } from "../support/cluster.ts";
import { T0 } from "../support/rules.ts";

let cluster: TollgateCluster;
let scripts: { store: RedisCapStore; previous: CapSendsCall };
beforeAll(() => {
  cluster = connectCluster();
  scripts = { store: new RedisCapStore(cluster), previous: previousScript(cluster, "capSendsPrevious") };
});
afterAll(async () => {
  await cluster.quit();
});

const policy = parsePolicy({
  version: "compact-rollout",
  channels: ["push"],
  segments: [],
  default: { name: "all", caps: { push: [{ window: "1h", max: 2 }] } },
});
const PAGE = Array.from({ length: 256 }, (_, i) => i);
// half the page, then the whole page: its users have two histories (classes 0 and 1, then 1 and 2)
const steps = (compactClasses: boolean): Step[] =>
  [PAGE.filter((user) => user % 2 === 0), PAGE, PAGE].map((users, i) => ({
    mode: "count",
    now: T0 + i * 60_000,
    at: T0 + i * 60_000,
    channel: "push",
    campaignId: `c${i}`,
    exemptCounted: false,
    users,
    withWindows: false,
    compactClasses,
    // the last call by v0.2.0's script
    byPrevious: i === 2,
  }));

describe("page blocks during the rollout of CAP_COMPACT_CLASSES", () => {
  it("decides as the model does with v0.2.0's script on the blocks the current one wrote with the switch off", async () => {
    const namespace = uniqueNamespace();
    const model = new CappingModel(policy, () => 0, REDELIVERY_MS);
    for (const step of steps(false)) {
      expect(await runScript(scripts, namespace, policy, () => 0, step, undefined)).toEqual(model.apply(step));
    }
  });

  it("has v0.2.0's script refuse a block written with the switch on, with an error naming the block's format", async () => {
    const namespace = uniqueNamespace();
    const model = new CappingModel(policy, () => 0, REDELIVERY_MS);
    const [first, second, byPrevious] = steps(true) as [Step, Step, Step];
    for (const step of [first, second]) {
      expect(await runScript(scripts, namespace, policy, () => 0, step, undefined)).toEqual(model.apply(step));
    }
    await expect(runScript(scripts, namespace, policy, () => 0, byPrevious, undefined)).rejects.toThrow(
      /unknown block format/,
    );
  });
});
