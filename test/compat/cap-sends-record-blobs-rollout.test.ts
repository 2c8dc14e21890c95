// v0.2.0's cap-sends and the current one deciding the same record blobs in turn, as during a rollout, against
// the reference model (IDs whose bytes straddle other IDs in a blob).
import fc from "fast-check";
import { afterAll, beforeAll, describe, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import { type CapSendsCall, previousScript } from "../support/cap-sends-runner.ts";
import { connectCluster } from "../support/cluster.ts";
import { policyArbitrary } from "../support/policy-arbitrary.ts";
import { runSteps, stepArbitrary } from "../support/record-blob-steps.ts";

let cluster: TollgateCluster;
/** The store, and the script before the change (v0.2.0's, test/compat/v0.2.0/cap-sends.lua) as EVAL: a rollout runs both. */
let scripts: { store: RedisCapStore; previous: CapSendsCall };
beforeAll(() => {
  cluster = connectCluster();
  scripts = { store: new RedisCapStore(cluster), previous: previousScript(cluster, "capSendsPrevious") };
});
afterAll(async () => {
  await cluster.quit();
});

describe("record blobs under IDs whose bytes straddle other IDs (review of the string.find lookup)", () => {
  it("decides as the model does with the script before the change (f63a65d) running some of the calls (a rollout)", async () => {
    await fc.assert(
      fc.asyncProperty(
        policyArbitrary,
        fc.constantFrom(90, 300, 8192),
        fc.array(stepArbitrary, { minLength: 5, maxLength: 20 }),
        async (policy, splitBytes, steps) => runSteps(scripts, policy, splitBytes, steps, true),
      ),
      { numRuns: Number(process.env.REVIEW_RUNS ?? 30) },
    );
  });
});
