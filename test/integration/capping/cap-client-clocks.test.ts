// Clients whose clocks lag or lead, on /v1/frequency and campaign batches, through the Capper on the real
// cluster: a user's sends live as long as a window that any accepted `at` can be decided in needs them,
// counted from the function's clock, so no lagging or leading client gets a send through that a true clock
// caps. The function's clock is a fixedClock; the server's time moving with it is played on the keys
// (elapseOnServer).
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisCapStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Capper } from "../../../functions/core/capping/capper.ts";
import { fixedClock, MAX_FUTURE_MS } from "../../../functions/core/shared/clock.ts";
import { CappingModel } from "../../support/capping-model.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { DAY, HOUR, rulesOf, simplePolicy, T0 } from "../../support/rules.ts";
import { elapseOnServer } from "../../support/server-time.ts";

const SECOND = 1000;
const MINUTE = 60 * SECOND;

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

/** 1 push an hour; the day-long "*" cap lets `at` go a day back (the policy's longest window). */
const oneAnHour = rulesOf(simplePolicy({ push: [{ window: "1h", max: 1 }], "*": [{ window: "1d", max: 100 }] }));

function client() {
  const clock = fixedClock(T0);
  const namespace = uniqueNamespace();
  const capper = new Capper({ store: new RedisCapStore(cluster), rules: () => oneAnHour, clock, namespace });
  const elapse = async (ms: number) => {
    clock.advance(ms);
    await elapseOnServer(cluster, namespace, ms);
  };
  return { clock, capper, elapse };
}

describe("a client whose clock lags 2 hours", () => {
  it("1 push an hour: a second /v1/frequency check 62 s later is capped", async () => {
    const { clock, capper, elapse } = client();
    const check = () => capper.checkUser({ userId: 17, channel: "push", at: clock.now() - 2 * HOUR });
    expect((await check()).decision).toBe("allowed");
    await elapse(62 * SECOND);
    expect(await check()).toMatchObject({ allowed: false, decision: "capped" });
  });

  it("1 push an hour: a second campaign's send 62 s later is capped", async () => {
    const { clock, capper, elapse } = client();
    const send = (campaignId: string) =>
      capper.capBatch({ campaignId, channel: "push", userIds: [17, 2_000_000], at: clock.now() - 2 * HOUR });
    expect((await send("first")).decisions.map((d) => d.decision)).toEqual(["allowed", "allowed"]);
    await elapse(62 * SECOND);
    expect((await send("second")).decisions.map((d) => d.decision)).toEqual(["capped", "capped"]);
  });
});

describe("a client whose clock leads 5 minutes", () => {
  it("its send holds for a client on a true clock until its hour is over", async () => {
    const { clock, capper, elapse } = client();
    await capper.checkUser({ userId: 17, channel: "push", at: clock.now() + 5 * MINUTE });
    await elapse(HOUR + 4 * MINUTE);
    expect((await capper.checkUser({ userId: 17, channel: "push" })).decision).toBe("capped");
  });
});

describe("any accepted client clock offset", () => {
  it("decides every check as the reference model does on the client's own times, hours passing on the server", async () => {
    // one client with a constant offset, its checks of one user against the model, which forgets nothing
    const offset = fc.oneof(
      fc.constant(-2 * HOUR),
      fc.constant(-DAY),
      fc.constant(MAX_FUTURE_MS),
      fc.integer({ min: -DAY / SECOND, max: MAX_FUTURE_MS / SECOND }).map((s) => s * SECOND),
    );
    const gap = fc.oneof(
      fc.constant(62 * SECOND),
      fc.integer({ min: 0, max: HOUR / SECOND }).map((s) => s * SECOND),
      fc.integer({ min: 0, max: (2 * DAY) / SECOND }).map((s) => s * SECOND),
    );
    await fc.assert(
      fc.asyncProperty(offset, fc.array(gap, { minLength: 1, maxLength: 10 }), async (d, gaps) => {
        const { clock, capper, elapse } = client();
        const model = new CappingModel(oneAnHour.policy, () => oneAnHour.policy.defaultSegment);
        for (const ms of gaps) {
          await elapse(ms);
          const at = clock.now() + d;
          const got = (await capper.checkUser({ userId: 17, channel: "push", at })).decision;
          const [want] = model.apply({
            mode: "count",
            now: clock.now(),
            at,
            channel: "push",
            campaignId: "",
            exemptCounted: false,
            users: [17],
          });
          expect(got, JSON.stringify({ d, gaps })).toBe(typeof want === "string" ? want : "capped");
        }
      }),
      { numRuns: 20 },
    );
  });
});
