// The check API's chaos checker on hand-made answers: a request the API let through is judged against the
// contract's model of its algorithm, charges kept for their guaranteed lifetime and no longer.
import { describe, expect, it } from "vitest";
import {
  type Answer,
  type ClientSpec,
  checkAnswers,
  guaranteedLifetimeMs,
  type LimitSpec,
  type Outcome,
} from "../../../scripts/chaos/check-api-checker.ts";

const client = (limit: LimitSpec, clockOffsetMs = 0): ClientSpec => ({
  client: 0,
  key: "k",
  limit,
  clockOffsetMs,
  costMax: 1,
});
/** An answer to a request sent at true time `t` (answered 5 ms later) by a client `offset` ms off. */
const answer = (t: number, outcome: Outcome, offset = 0, cost = 1): Answer => ({
  client: 0,
  at: t + offset,
  cost,
  outcome,
  sentAt: t,
  answeredAt: t + 5,
});
const verdictOf = (spec: ClientSpec, answers: Answer[]) => checkAnswers([spec], answers);

const fixed = client({ algorithm: "fixed-window", max: 2, windowMs: 1_000 });

describe("check API checker: a request passed that the contract denies", () => {
  it("passes max allowed in a fixed window and fails one more", () => {
    expect(verdictOf(fixed, [answer(0, "allowed"), answer(100, "allowed"), answer(200, "denied")]).pass).toBe(true);
    const over = verdictOf(fixed, [answer(0, "allowed"), answer(100, "allowed"), answer(200, "allowed")]);
    expect(over.pass).toBe(false);
    expect(over.figures.passedDenied).toBe(1);
  });

  it.each<[string, LimitSpec, number[]]>([
    ["sliding-window", { algorithm: "sliding-window", max: 2, windowMs: 1_000 }, [0, 100, 200]],
    ["sliding-log", { algorithm: "sliding-log", max: 2, windowMs: 1_000 }, [0, 100, 900]],
    ["token-bucket", { algorithm: "token-bucket", max: 2, refillAmount: 1, refillEveryMs: 1_000 }, [0, 10, 20]],
    ["gcra", { algorithm: "gcra", burst: 1, count: 1, periodMs: 1_000 }, [0, 10, 20]],
  ])("fails a third request allowed in a row under a %s of 2", (_name, limit, times) => {
    const answers = times.map((t) => answer(t, "allowed"));
    expect(verdictOf(client(limit), answers).figures.passedDenied).toBe(1);
    expect(verdictOf(client(limit), answers.slice(0, 2)).pass).toBe(true);
  });

  it("judges a lagging client by its own `at`: state it wrote 2 h in the past still holds", () => {
    const lag = -2 * 3_600_000;
    const lagging = client({ algorithm: "sliding-log", max: 1, windowMs: 60_000 }, lag);
    // a second request 2 s later in true time: inside the window in the client's timeline, so denied
    expect(verdictOf(lagging, [answer(0, "allowed", lag), answer(2_000, "allowed", lag)]).pass).toBe(false);
  });

  it("fails a request allowed because state was forgotten within its guaranteed lifetime (a lost key)", () => {
    const log = client({ algorithm: "sliding-log", max: 1, windowMs: 30_000 });
    expect(verdictOf(log, [answer(0, "allowed"), answer(29_000, "allowed")]).figures.passedDenied).toBe(1);
  });

  it("passes a request allowed once every charge it met was older than the guaranteed lifetime", () => {
    // a window of 2 min: the contract keeps a state at least 60 s, so after that the key may be gone
    const long = client({ algorithm: "fixed-window", max: 1, windowMs: 120_000 });
    expect(guaranteedLifetimeMs(long.limit)).toBe(60_000);
    const result = verdictOf(long, [answer(0, "allowed"), answer(61_000, "allowed")]);
    expect(result.pass).toBe(true);
    expect(result.figures.afterLifetime).toBe(1);
  });

  it("charges nothing for a request that may have been counted (the reading most favourable to the API)", () => {
    const answers = [answer(0, "maybe-counted"), answer(10, "allowed"), answer(20, "allowed")];
    expect(verdictOf(fixed, answers).pass).toBe(true);
    expect(verdictOf(fixed, [...answers, answer(30, "allowed")]).pass).toBe(false);
  });

  it("fails a valid request the API refused (4xx)", () => {
    expect(verdictOf(fixed, [answer(0, "refused")]).verdicts.find((v) => v.rule === "refused")?.pass).toBe(false);
  });
});
