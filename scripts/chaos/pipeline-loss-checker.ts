// The campaign pipeline's checker for a run whose store lost its state (FLUSHALL) and whose operator then ran
// `tollgate store acknowledge`. What the contract promises (docs/api.md, onStoreLoss; docs/OPERATIONS.md, "When
// the store lost state"), under `pause`, the default:
// - the loss is detected by the first call on a lost slot: from the end of the flush to the StoreLost report
//   no more than one batch, and no send allowed after the flush before the acknowledge ("nothing counted");
// - before the loss, the store counted against its state: every window of the sends it allowed then holds ≤ max;
// - after the acknowledge, the store counts from empty: every window of the sends it allowed from then on holds
//   ≤ max on its own (a window spanning the loss may hold the forgotten sends as well: the operator's choice);
// - nothing is lost: every pushed send delivered, capped or dead-lettered with a reason (a record paused past
//   its last receive is dead-lettered with its StoreLostError, as documented).
// A run in which nothing was allowed after the acknowledge judges no recovery: it fails.
import {
  type CappedSend,
  type CapRule,
  checkPipeline,
  type DeliveredSend,
  type PipelineCheck,
  type PipelineOutput,
  type PipelineVerdict,
} from "./pipeline-checker.ts";

/**
 * A record the consumers decided, when the consumer had decided it (true clock): the users it allowed, and those
 * the store already held as sent (an earlier attempt counted them, then failed before it forwarded them).
 */
export interface DecidedRecord {
  seq: number;
  allowed: number[];
  duplicate: number[];
  decidedAt: number;
}

/** When the flush ran, when the harness saw it reported, and when the acknowledge began and returned (ms). */
export interface LossTimeline {
  injectedAt: number;
  healedAt: number;
  reportedAt: number | undefined;
  acknowledgeStartedAt: number | undefined;
  acknowledgedAt: number | undefined;
}

/**
 * A decision is told after its delivery message is sent: a script that ran before the flush ended may be told
 * up to this much later.
 */
export const REPORT_LAG_MS = 1000;
/** One batch: the stream sends a campaign every few hundred ms, and the first call after the flush finds it. */
export const DETECT_WITHIN_MS = 2000;

export function checkPipelineAfterLoss(
  output: PipelineOutput,
  caps: readonly CapRule[],
  decided: readonly DecidedRecord[],
  loss: LossTimeline,
): PipelineCheck {
  const whole = checkPipeline(output, caps);
  const pushedBySeq = new Map(output.pushed.map((m) => [m.seq, m]));
  const ackFrom = loss.acknowledgeStartedAt ?? Number.POSITIVE_INFINITY;
  const pausedFrom = loss.healedAt + REPORT_LAG_MS;
  const sendOf = (seq: number, userId: number): DeliveredSend | undefined => {
    const m = pushedBySeq.get(seq);
    if (!m) return undefined;
    const dedupeId = `${m.campaignId}:${m.channel}:${userId}`;
    return { seq, campaignId: m.campaignId, channel: m.channel, userId, dedupeId };
  };
  // the sends the store counted in each epoch, by when they were decided: the allowed ones and the duplicates
  // (a duplicate is the store saying it holds the send as counted: before the flush, by an attempt that failed
  // after its call answered, whose decisions were never reported; after the acknowledge, since the flush
  // forgot every earlier one, by an attempt that counted some users while the acknowledge wrote the slots back
  // and failed on a slot not yet written); checkPipeline counts each dedupe id once
  const before: DeliveredSend[] = [];
  const after: DeliveredSend[] = [];
  const paused: string[] = [];
  for (const record of decided) {
    const afterAck = record.decidedAt >= ackFrom;
    for (const userId of [...record.allowed, ...record.duplicate]) {
      const send = sendOf(record.seq, userId);
      if (!send) continue;
      if (afterAck) after.push(send);
      else if (record.decidedAt <= pausedFrom) before.push(send);
      else paused.push(`user ${userId} of message ${record.seq}`);
    }
  }
  const cappedIn = (from: number, to: number): CappedSend[] =>
    output.capped.filter((c) => c.decidedAt !== undefined && c.decidedAt >= from && c.decidedAt < to);
  const cappedPaused = cappedIn(pausedFrom, ackFrom).length;
  const epoch = (delivered: DeliveredSend[], capped: CappedSend[]) =>
    checkPipeline({ pushed: output.pushed, delivered, capped, deadLettered: [] }, caps);
  // an acknowledge can come sooner than the report lag: what was decided after it is the new epoch's
  const beforeCheck = epoch(before, cappedIn(Number.NEGATIVE_INFINITY, Math.min(pausedFrom, ackFrom)));
  const afterCheck = epoch(after, cappedIn(ackFrom, Number.POSITIVE_INFINITY));

  // every send the store counted went out
  const out = new Set(output.delivered.map((s) => `${s.seq}/${s.userId}`));
  const unsent = [...before, ...after].filter((s) => !out.has(`${s.seq}/${s.userId}`)).length;

  const detectMs = loss.reportedAt === undefined ? undefined : loss.reportedAt - loss.healedAt;
  const pick = (check: PipelineCheck, rule: PipelineVerdict["rule"]) =>
    check.verdicts.find((v) => v.rule === rule) as PipelineVerdict;
  const epochVerdict = (name: string, check: PipelineCheck, rule: "window" | "counted-twice"): PipelineVerdict => {
    const v = pick(check, rule);
    return { rule, pass: v.pass, detail: `${name}: ${v.detail}` };
  };
  const verdicts: PipelineVerdict[] = [
    {
      rule: "loss",
      pass: detectMs !== undefined && detectMs <= DETECT_WITHIN_MS,
      detail:
        detectMs === undefined
          ? "the loss was never reported"
          : `StoreLost reported ${detectMs} ms after the flush (within ${DETECT_WITHIN_MS} ms)`,
    },
    {
      rule: "loss",
      pass: paused.length === 0 && cappedPaused === 0,
      detail: `${paused.length} sends allowed and ${cappedPaused} capped between the flush and the acknowledge${paused.length ? ` (${paused.slice(0, 3).join(", ")})` : ""}`,
    },
    {
      rule: "loss",
      pass: loss.acknowledgedAt !== undefined && after.length > 0,
      detail:
        loss.acknowledgedAt === undefined
          ? "no acknowledge in the run"
          : `${after.length} sends allowed after the acknowledge (${loss.acknowledgedAt - (loss.reportedAt ?? loss.healedAt)} ms after the report), ${before.length} before the flush`,
    },
    epochVerdict("before the flush", beforeCheck, "window"),
    epochVerdict("after the acknowledge", afterCheck, "window"),
    epochVerdict("before the flush", beforeCheck, "counted-twice"),
    epochVerdict("after the acknowledge", afterCheck, "counted-twice"),
    pick(whole, "lost"),
    pick(whole, "dedupe"),
    { rule: "lost", pass: unsent === 0, detail: `${unsent} allowed sends never delivered` },
  ];
  const figures = {
    ...whole.figures,
    worst: afterCheck.figures.worst ?? beforeCheck.figures.worst,
    windowsOverMax: beforeCheck.figures.windowsOverMax + afterCheck.figures.windowsOverMax,
    countedTwice: beforeCheck.figures.countedTwice + afterCheck.figures.countedTwice,
  };
  return { figures, verdicts, pass: verdicts.every((v) => v.pass) };
}
