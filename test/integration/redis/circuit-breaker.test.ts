// The circuit breaker of the Redis adapter on a cluster of its own that is stopped and started again: it
// opens after calls without an answer, then fails calls at once without sending them, and closes by
// itself once Redis answers. The time it waits is read from a faked Date (only Date), never slept.
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createRedisCluster, redisCallsOf, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { StoreUnavailableError } from "../../../functions/core/shared/errors.ts";
import { startCluster, stopCluster } from "../../../scripts/redis-cluster.ts";
import { basePort, uniqueNamespace } from "../../support/cluster.ts";

// away from the suite's cluster and the outage test's
const OWN_PORT = basePort + 20;
const states: string[] = [];
let cluster: TollgateCluster;
beforeAll(async () => {
  await startCluster({ basePort: OWN_PORT });
  cluster = createRedisCluster({
    nodes: [{ host: "127.0.0.1", port: OWN_PORT }],
    connectTimeoutMs: 200,
    circuit: { threshold: 2, halfOpenAfterMs: 60_000, probeDeadlineMs: 5_000, onStateChange: (s) => states.push(s) },
  });
});
afterAll(async () => {
  vi.useRealTimers();
  cluster.disconnect();
  await stopCluster({ basePort: OWN_PORT });
});

const key = `${uniqueNamespace()}:k`;
const incr = (deadlineMs = 300) =>
  redisCallsOf(cluster).call("incr", [key], () => cluster.incr(key), { deadlineMs, retryOn: "no-answer" });

describe("the circuit breaker", () => {
  it("opens after `threshold` calls without an answer; then a call fails at once, not sent", async () => {
    expect(await incr(2_000)).toBe(1);
    await stopCluster({ basePort: OWN_PORT });
    for (let i = 0; i < 2; i++) await expect(incr()).rejects.toThrow(StoreUnavailableError);
    expect(redisCallsOf(cluster).circuit).toBe("open");
    const sends = vi.fn(() => cluster.incr(key));
    const error = (await redisCallsOf(cluster)
      .call("incr", [key], sends, { deadlineMs: 300, retryOn: "no-answer" })
      .catch((e: unknown) => e)) as StoreUnavailableError;
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(error.mayHaveRun).toBe(false);
    expect(error.message).toContain("circuit is open");
    expect(sends).not.toHaveBeenCalled();
  });

  it("closes by itself once Redis answers again, after the half-open wait", async () => {
    await startCluster({ basePort: OWN_PORT });
    // before the wait is over, calls still fail at once
    await expect(incr()).rejects.toThrow(/circuit is open/);
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(Date.now() + 60_001);
    // this call is the trial: Redis answers (a fresh cluster, so the count starts again), and the circuit closes
    expect(await incr(5_000)).toBe(1);
    expect(redisCallsOf(cluster).circuit).toBe("closed");
    expect(states).toEqual(["open", "half-open", "closed"]);
  });
});
