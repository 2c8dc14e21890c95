// The check API's checker: replays every answered request of a run, with its `at`, against a model of its
// algorithm written from docs/api.md (test/support/limit-models.ts: fixed window, sliding window, sliding log,
// token bucket, GCRA, their replay rules included), and finds any request the API let through that the
// contract denies. The model keeps every charge for as long as the contract does (a state lives at least its
// span in the request's own timeline), so state the store lost or let expire early shows up here as a request
// passed that the model denies. Nothing here knows how the scripts decide.
import {
  FixedWindowModel,
  GcraModel,
  type LimitModel,
  SlidingLogModel,
  SlidingWindowModel,
  TokenBucketModel,
} from "../../test/support/limit-models.ts";

export type LimitSpec =
  | { algorithm: "fixed-window" | "sliding-window" | "sliding-log"; max: number; windowMs: number }
  | { algorithm: "token-bucket"; max: number; refillAmount: number; refillEveryMs: number }
  | { algorithm: "gcra"; burst: number; count: number; periodMs: number };

/** One client of a run: its own key, one limit, a clock `clockOffsetMs` off the true one (what its `at` says). */
export interface ClientSpec {
  client: number;
  key: string;
  limit: LimitSpec;
  clockOffsetMs: number;
  /** The largest cost it asks (1: every request costs 1; more: a cost drawn from 1..costMax). */
  costMax: number;
}

/**
 * What one request got: `allowed` / `denied` (200), `not-counted` (a 503 that says the command never ran:
 * `maybeCounted: false`), `maybe-counted` (a 503 `maybeCounted: true`, a 5xx, no answer in time), `refused`
 * (a 4xx: the request was valid, so a refusal is a defect).
 */
export type Outcome = "allowed" | "denied" | "not-counted" | "maybe-counted" | "refused";

export interface Answer {
  client: number;
  /** The request's `at`: its client's clock when sent (true time + the client's offset). */
  at: number;
  cost: number;
  outcome: Outcome;
  /** When it was sent and answered, on the true clock (ms since the epoch). */
  sentAt: number;
  answeredAt: number;
}

export interface CheckApiFigures {
  answered: number;
  allowed: number;
  denied: number;
  /** 503s and requests with no answer. */
  unavailable: number;
  refused: number;
  /** Allowed by the API, denied by the contract (its model). */
  passedDenied: number;
  /** Allowed only because state older than its guaranteed lifetime was gone (the contract allows it). */
  afterLifetime: number;
  /** Denied by the API though the contract would allow it (reported: a denial under a fault is allowed). */
  deniedAllowed: number;
}

export interface CheckApiVerdict {
  /** "loss": a data-loss run's detection, pause and recovery (check-api-loss-checker.ts). */
  rule: "contract" | "refused" | "run" | "loss";
  pass: boolean;
  detail: string;
}

export interface CheckApiCheck {
  figures: CheckApiFigures;
  verdicts: CheckApiVerdict[];
  pass: boolean;
}

/**
 * How long the contract keeps a state at least: min(one span of the limit, 60 s) after it was written
 * (docs/api.md, Replay). A window's span is its length, a bucket's the time to refill from empty, GCRA's the
 * time a full burst takes to drain.
 */
export function guaranteedLifetimeMs(limit: LimitSpec): number {
  const span =
    limit.algorithm === "token-bucket"
      ? Math.ceil(limit.max / limit.refillAmount) * limit.refillEveryMs
      : limit.algorithm === "gcra"
        ? ((limit.burst + 1) * limit.periodMs) / limit.count
        : limit.windowMs;
  return Math.min(span, 60_000);
}

function modelOf(limit: LimitSpec): { model: LimitModel<unknown>; params: unknown } {
  switch (limit.algorithm) {
    case "fixed-window":
      return { model: new FixedWindowModel() as LimitModel<unknown>, params: limit };
    case "sliding-window":
      return { model: new SlidingWindowModel() as LimitModel<unknown>, params: limit };
    case "sliding-log":
      return { model: new SlidingLogModel() as LimitModel<unknown>, params: limit };
    case "token-bucket":
      return { model: new TokenBucketModel() as LimitModel<unknown>, params: { ...limit, strict: false } };
    case "gcra":
      return { model: new GcraModel() as LimitModel<unknown>, params: limit };
  }
}

/**
 * Each client's answers in the order it got them (one request at a time per key, so the order the API decided
 * them in). The model charges what the API allowed and the contract allows; a request that may have been
 * counted (a 503, no answer) is not charged, the reading most favourable to the API: every algorithm here only
 * grows stricter with more charges, so a request the model denies even then is one the contract denies.
 */
export function checkAnswers(clients: readonly ClientSpec[], answers: readonly Answer[]): CheckApiCheck {
  const figures: CheckApiFigures = {
    answered: answers.length,
    allowed: 0,
    denied: 0,
    unavailable: 0,
    refused: 0,
    passedDenied: 0,
    afterLifetime: 0,
    deniedAllowed: 0,
  };
  const examples: string[] = [];
  for (const spec of clients) {
    const { model, params } = modelOf(spec.limit);
    const lifetime = guaranteedLifetimeMs(spec.limit);
    const charged: Answer[] = [];
    /**
     * A request the full model denies may still be one the contract allows: the state it needed may have
     * expired, if every charge it held was written (sent, at the earliest) a guaranteed lifetime before the
     * request was answered (at the latest). Replays only the charges younger than that.
     */
    const allowedAfterForgetting = (answer: Answer) => {
      const fresh = modelOf(spec.limit);
      for (const c of charged)
        if (c.sentAt > answer.answeredAt - lifetime) fresh.model.decide(c.at, c.cost, fresh.params).commit();
      return fresh.model.decide(answer.at, answer.cost, fresh.params).reply.allowed;
    };
    for (const answer of answers.filter((a) => a.client === spec.client)) {
      if (answer.outcome === "refused") figures.refused++;
      if (answer.outcome === "not-counted" || answer.outcome === "maybe-counted") figures.unavailable++;
      if (answer.outcome !== "allowed" && answer.outcome !== "denied") continue;
      const decision = model.decide(answer.at, answer.cost, params);
      if (answer.outcome === "allowed") {
        figures.allowed++;
        if (decision.reply.allowed) decision.commit();
        else if (allowedAfterForgetting(answer)) figures.afterLifetime++;
        else {
          figures.passedDenied++;
          if (examples.length < 3)
            examples.push(
              `${spec.limit.algorithm} client ${spec.client} (clock ${spec.clockOffsetMs} ms) at ${answer.at}`,
            );
        }
        charged.push(answer);
      } else {
        figures.denied++;
        if (decision.reply.allowed) figures.deniedAllowed++;
      }
    }
  }
  const verdicts: CheckApiVerdict[] = [
    {
      rule: "contract",
      pass: figures.passedDenied === 0,
      detail: `${figures.passedDenied} of ${figures.allowed} allowed requests the contract denies${examples.length ? ` (${examples.join("; ")})` : ""}`,
    },
    { rule: "refused", pass: figures.refused === 0, detail: `${figures.refused} valid requests answered 4xx` },
  ];
  return { figures, verdicts, pass: verdicts.every((v) => v.pass) };
}
