// The check API's checker for a run whose store lost every slot (FLUSHALL) and whose operator then ran
// `tollgate store acknowledge` once GET /v1/health reported the loss. What the contract promises (docs/api.md,
// onStoreLoss and the 503 `store_lost`), under `pause`, the default:
// - the loss is detected by the first call on a lost slot, and health reports it within one probe;
// - no request sent after the flush and answered before the acknowledge is allowed (503 `store_lost`: nothing
//   counted against forgotten state);
// - before the flush, every answer holds against the models of check-api-checker.ts;
// - after the acknowledge, the store counts from empty: the answers of requests sent after the flush and
//   answered once the acknowledge began are judged on models that start empty then.
// A run in which nothing was allowed after the acknowledge judges no recovery: it fails.
import {
  type Answer,
  type CheckApiCheck,
  type CheckApiVerdict,
  type ClientSpec,
  checkAnswers,
} from "./check-api-checker.ts";

/** When the flush ran, when health reported it, and when the acknowledge began and returned (true clock, ms). */
export interface CheckApiLossTimeline {
  injectedAt: number;
  healedAt: number;
  reportedAt: number | undefined;
  acknowledgeStartedAt: number | undefined;
  acknowledgedAt: number | undefined;
}

/** Health probes the store on each call: the harness asks every 100 ms, so a report within 2 s is one probe. */
export const HEALTH_REPORT_WITHIN_MS = 2000;

export function checkAnswersAfterLoss(
  clients: readonly ClientSpec[],
  answers: readonly Answer[],
  loss: CheckApiLossTimeline,
): CheckApiCheck {
  const ackFrom = loss.acknowledgeStartedAt ?? Number.POSITIVE_INFINITY;
  const before = answers.filter((a) => a.sentAt <= loss.healedAt);
  const paused = answers.filter((a) => a.sentAt > loss.healedAt && a.answeredAt < ackFrom);
  const after = answers.filter((a) => a.sentAt > loss.healedAt && a.answeredAt >= ackFrom);
  const beforeCheck = checkAnswers(clients, before);
  const afterCheck = checkAnswers(clients, after);
  const pausedAllowed = paused.filter((a) => a.outcome === "allowed").length;
  const pausedDecided = paused.filter((a) => a.outcome === "denied").length;
  const reportMs = loss.reportedAt === undefined ? undefined : loss.reportedAt - loss.healedAt;
  const contract = (name: string, check: CheckApiCheck): CheckApiVerdict => {
    const v = check.verdicts.find((x) => x.rule === "contract") as CheckApiVerdict;
    return { rule: "contract", pass: v.pass, detail: `${name}: ${v.detail}` };
  };
  const verdicts: CheckApiVerdict[] = [
    {
      rule: "loss",
      pass: reportMs !== undefined && reportMs <= HEALTH_REPORT_WITHIN_MS,
      detail:
        reportMs === undefined
          ? "GET /v1/health never reported the loss"
          : `GET /v1/health reported the loss ${reportMs} ms after the flush (within ${HEALTH_REPORT_WITHIN_MS} ms)`,
    },
    {
      rule: "loss",
      pass: pausedAllowed === 0,
      detail: `${pausedAllowed} of ${paused.length} requests between the flush and the acknowledge allowed (${pausedDecided} denied)`,
    },
    {
      rule: "loss",
      pass: loss.acknowledgedAt !== undefined && afterCheck.figures.allowed > 0,
      detail:
        loss.acknowledgedAt === undefined
          ? "no acknowledge in the run"
          : `${afterCheck.figures.allowed} requests allowed after the acknowledge (it took ${loss.acknowledgedAt - ackFrom} ms)`,
    },
    contract("before the flush", beforeCheck),
    contract("after the acknowledge", afterCheck),
    {
      rule: "refused",
      pass: beforeCheck.figures.refused + afterCheck.figures.refused === 0,
      detail: `${beforeCheck.figures.refused + afterCheck.figures.refused} valid requests answered 4xx`,
    },
  ];
  const sum = (key: keyof CheckApiCheck["figures"]) => beforeCheck.figures[key] + afterCheck.figures[key];
  const whole = checkAnswers(clients, answers).figures;
  const figures = {
    ...whole,
    passedDenied: sum("passedDenied") + pausedAllowed,
    afterLifetime: sum("afterLifetime"),
    deniedAllowed: sum("deniedAllowed"),
  };
  return { figures, verdicts, pass: verdicts.every((v) => v.pass) };
}
