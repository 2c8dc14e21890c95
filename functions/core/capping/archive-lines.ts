// The decision archive's lines for capping: one per campaign send decided (and forwarded), one per
// `/v1/frequency` check. The record schema is docs/archive.md's; the Glue table (infra/archive.ts) and the
// queries (scripts/archive-query.ts) read these names. A batch's shared fields are encoded once: a line
// costs a few string joins, not a JSON.stringify per send.
import type { CampaignBatch } from "./campaign-batch.ts";
import type { CapBatchResult, CapDecision } from "./decisions.ts";
import { dedupeId } from "./delivery.ts";
import type { FrequencyResult } from "./frequency.ts";
import type { CapRule } from "./policy.ts";

const capLabel = (cap: CapRule) => `${cap.channel}:${cap.window}`;

/**
 * Every decision of a forwarded batch, one line each, handed to `add`. `decidedAt`: the clock reading the
 * batch was decided by (`at` is the send time the caps were evaluated at).
 */
export function campaignDecisionLines(
  batch: Pick<CampaignBatch, "campaignId" | "channel">,
  result: CapBatchResult,
  decidedAt: number,
  add: (line: string) => void,
): void {
  const prefix =
    `{"kind":"campaign","decidedAt":${decidedAt},"at":${result.at},` +
    `"policyVersion":${JSON.stringify(result.policyVersion)},"campaignId":${JSON.stringify(batch.campaignId)},` +
    `"channel":${JSON.stringify(batch.channel)},"userId":`;
  const segments = new Map<string, string>();
  const caps = new Map<CapRule, string>();
  const dedupePrefix = JSON.stringify(dedupeId(batch.campaignId, batch.channel, 0)).slice(0, -2);
  for (const decision of result.decisions) {
    let segment = segments.get(decision.segment);
    if (segment === undefined) {
      segment = JSON.stringify(decision.segment);
      segments.set(decision.segment, segment);
    }
    add(
      `${prefix}${decision.userId},"segment":${segment},"decision":"${decision.decision}",` +
        `${capFields(decision, caps)}${heldFields(decision)}"dedupeId":${dedupePrefix}${decision.userId}"}`,
    );
  }
}

/** A send held by quiet hours: why, the user's zone and when it is eligible; nothing for any other. */
function heldFields(decision: CapDecision): string {
  if (decision.eligibleAt === undefined) return "";
  return `"reason":"quiet_hours","zone":${JSON.stringify(decision.zone)},"eligibleAt":${decision.eligibleAt},`;
}

/** The cap that bit (label, window, max), or nulls; encoded once per cap. */
function capFields(decision: CapDecision, caps: Map<CapRule, string>): string {
  const { cap } = decision;
  // absent fields read as null (DuckDB's columns, the Glue table): a send no cap denied carries none
  if (!cap) return "";
  let fields = caps.get(cap);
  if (fields === undefined) {
    fields =
      `"reason":"cap","cap":${JSON.stringify(capLabel(cap))},"capChannel":${JSON.stringify(cap.channel)},` +
      `"capWindowMs":${cap.windowMs},"capMax":${cap.max},`;
    caps.set(cap, fields);
  }
  return fields;
}

/** One `/v1/frequency` check: the request, the decision, and every window's figures after it. */
export function frequencyLine(
  request: { userId: number; channel: string; campaignId?: string; consume?: boolean },
  result: FrequencyResult,
  decidedAt: number,
  at: number,
): string {
  const bit = result.windows.find((window) => window.remaining <= 0 && result.decision === "capped");
  return JSON.stringify({
    kind: "frequency",
    decidedAt,
    at,
    campaignId: request.campaignId ?? null,
    channel: request.channel,
    userId: request.userId,
    segment: result.segment,
    decision: result.decision,
    consume: request.consume !== false,
    reason: bit ? "cap" : (result.reason ?? null),
    ...(result.eligibleAt === undefined ? {} : { eligibleAt: result.eligibleAt }),
    cap: bit ? `${bit.channel}:${bit.window}` : null,
    capMax: bit ? bit.max : null,
    capUsed: bit ? bit.used : null,
    windows: result.windows.map(({ channel, window, max, used, remaining }) => ({
      channel,
      window,
      max,
      used,
      remaining,
    })),
  });
}
