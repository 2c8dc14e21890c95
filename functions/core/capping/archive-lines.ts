// The decision archive's lines for capping: one per forwarded campaign batch (every decision of it, in
// columns), one per `/v1/frequency` check. The record schema is docs/archive.md's; the Glue table
// (infra/archive.ts) and the queries (scripts/archive-query.ts) read these names and expand a batch line
// into one row per decision. A batch costs one line of a few bytes a user: its users as runs of consecutive
// IDs, a character per user naming its decision class (segment, decision, the cap that bit or the quiet
// hours that held it), and the table of those classes, instead of a JSON line per send.
import type { CampaignBatch } from "./campaign-batch.ts";
import type { CapBatchResult, CapDecision, DecisionKind } from "./decisions.ts";
import type { FrequencyResult } from "./frequency.ts";
import type { CapRule } from "./policy.ts";

/**
 * A batch line's class codes: the character at index i names `classTable[i]`. JSON-safe characters only;
 * a batch with more classes than this is archived as several lines.
 */
export const CLASS_CODES = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_";

const capLabel = (cap: CapRule) => `${cap.channel}:${cap.window}`;

/** A class key for the sends a cap's reserve displaced (the cap itself keys the sends it capped). */
const displacedKeys = new WeakMap<CapRule, { displacedBy: CapRule }>();
function displacedKey(cap: CapRule): { displacedBy: CapRule } {
  let key = displacedKeys.get(cap);
  if (key === undefined) {
    key = { displacedBy: cap };
    displacedKeys.set(cap, key);
  }
  return key;
}

/** The builder of one batch line: users in input order, their runs, codes and the class table. */
class BatchLine {
  readonly runs: string[] = [];
  readonly classes: string[] = [];
  private readonly index = new Map<string, Map<string | CapRule | { displacedBy: CapRule }, number>>();
  private readonly codes: Uint8Array;
  users = 0;
  private runStart = -1;
  private runEnd = -2;

  constructor(capacity: number) {
    this.codes = new Uint8Array(capacity);
  }

  /** The class's code, or -1 when the table is full (the caller starts a new line). */
  classOf({ segment, decision, cap, zone, eligibleAt }: CapDecision): number {
    let bySegment = this.index.get(segment);
    if (bySegment === undefined) {
      bySegment = new Map();
      this.index.set(segment, bySegment);
    }
    // a send held by quiet hours: its class is its zone's and instant's (one per segment and zone present); a
    // displaced send's is its cap's, apart from the sends that cap capped
    const key =
      cap === undefined
        ? eligibleAt === undefined
          ? decision
          : `${decision}|${zone}|${eligibleAt}`
        : decision === "displaced"
          ? displacedKey(cap)
          : decision === "capped"
            ? cap
            : `${decision}|${capLabel(cap)}|${cap.windowMs}|${cap.max}`;
    let code = bySegment.get(key);
    if (code === undefined) {
      if (this.classes.length === CLASS_CODES.length) return -1;
      code = this.classes.length;
      const held = cap === undefined && eligibleAt !== undefined ? { zone, eligibleAt } : undefined;
      this.classes.push(classJson(segment, decision, cap, held));
      bySegment.set(key, code);
    }
    return code;
  }

  push(userId: number, code: number): void {
    this.codes[this.users++] = CLASS_CODES.charCodeAt(code);
    if (userId === this.runEnd + 1) {
      this.runEnd = userId;
      return;
    }
    if (this.runStart >= 0) this.runs.push(`[${this.runStart},${this.runEnd}]`);
    this.runStart = userId;
    this.runEnd = userId;
  }

  /** The line's columns: `"users":…,"classes":…,"classTable":…,"records":n}`. */
  close(): string {
    if (this.runStart >= 0) this.runs.push(`[${this.runStart},${this.runEnd}]`);
    const codes = ascii.decode(this.codes.subarray(0, this.users));
    return `"records":${this.users},"users":[${this.runs.join(",")}],"classes":"${codes}","classTable":[${this.classes.join(",")}]}`;
  }
}

/** The codes are ASCII: one byte, one character. */
const ascii = new TextDecoder();

/**
 * A class of the table: absent fields read as null (DuckDB's columns, the Glue table). A send held by quiet
 * hours carries why, the user's zone and when it is eligible.
 */
function classJson(
  segment: string,
  decision: DecisionKind,
  cap: CapRule | undefined,
  held: { zone: string | undefined; eligibleAt: number } | undefined,
): string {
  const fields = `{"segment":${JSON.stringify(segment)},"decision":"${decision}"`;
  if (held)
    return `${fields},"reason":"quiet_hours","zone":${JSON.stringify(held.zone ?? null)},"eligibleAt":${held.eligibleAt}}`;
  if (!cap) return `${fields}}`;
  if (decision === "deferred" || decision === "dropped")
    // a capped or displaced send of a deferring campaign: capUsed unknown (a displaced one's window held fewer)
    return (
      `${fields},"reason":"cap","cap":${JSON.stringify(capLabel(cap))},"capChannel":${JSON.stringify(cap.channel)},` +
      `"capWindowMs":${cap.windowMs},"capMax":${cap.max},"capUsed":null}`
    );
  if (decision === "displaced")
    // capUsed unknown: the window held at least the room the send's priority sees and fewer than max
    return (
      `${fields},"reason":"reserve","cap":${JSON.stringify(capLabel(cap))},"capChannel":${JSON.stringify(cap.channel)},` +
      `"capWindowMs":${cap.windowMs},"capMax":${cap.max},"capUsed":null}`
    );
  // capUsed: the cap's count at the decision. Exact from the reply's cap index: cap-sends denies a send only
  // when a window around `at` holds max sends, and allows one only when every such window holds fewer, so
  // under the caps it decided by no window holds more than max (the window rule of
  // lua/cap-sends/window-rule.lua; test/integration/pipeline/decision-archive.test.ts holds it to the engine's)
  return (
    `${fields},"reason":"cap","cap":${JSON.stringify(capLabel(cap))},"capChannel":${JSON.stringify(cap.channel)},` +
    `"capWindowMs":${cap.windowMs},"capMax":${cap.max},"capUsed":${cap.max}}`
  );
}

/**
 * Every decision of a forwarded batch, handed to `add` as one line (more only past CLASS_CODES' classes)
 * with how many decisions it holds. `decidedAt`: the clock reading the batch was decided by (`at` is the
 * send time the caps were evaluated at).
 */
export function campaignDecisionLines(
  batch: Pick<CampaignBatch, "campaignId" | "channel">,
  result: CapBatchResult,
  decidedAt: number,
  add: (line: string, records: number) => void,
): void {
  const head =
    `{"kind":"campaign-batch","decidedAt":${decidedAt},"at":${result.at},` +
    `"policyVersion":${JSON.stringify(result.policyVersion)},"campaignId":${JSON.stringify(batch.campaignId)},` +
    `"channel":${JSON.stringify(batch.channel)},`;
  const { decisions } = result;
  let line = new BatchLine(decisions.length);
  for (const decision of decisions) {
    let code = line.classOf(decision);
    if (code < 0) {
      add(head + line.close(), line.users);
      line = new BatchLine(decisions.length);
      code = line.classOf(decision);
    }
    line.push(decision.userId, code);
  }
  if (line.users > 0) add(head + line.close(), line.users);
}

/** One `/v1/frequency` check: the request, the decision, and every window's figures after it. */
export function frequencyLine(
  request: { userId: number; channel: string; campaignId?: string; consume?: boolean },
  result: FrequencyResult,
  decidedAt: number,
  at: number,
): string {
  const refused = result.decision === "capped" || result.decision === "displaced";
  const bit = refused ? result.windows.find((window) => window.remaining <= 0) : undefined;
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
    reason: result.reason ?? (bit ? "cap" : null),
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
