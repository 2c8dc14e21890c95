// The operator's questions to the decision archive: why was a user capped (or allowed), and what did a
// campaign do. Answers are data (the tests hold them against the engine) and text (the CLI prints it).
import type { CapRule, Policy } from "../functions/core/capping/policy.ts";
import type { OpenArchive } from "./archive-query.ts";

export interface DecisionRow {
  kind: "campaign" | "frequency";
  decidedAt: number;
  at: number;
  policyVersion: string | null;
  campaignId: string | null;
  channel: string;
  userId: number;
  segment: string;
  decision: "allowed" | "capped" | "displaced" | "duplicate" | "exempt" | "quiet" | "deferred" | "dropped";
  /** `cap`, `reserve` (room kept for higher priorities), `quiet_hours`, or null. */
  reason: string | null;
  cap: string | null;
  capChannel: string | null;
  capWindowMs: number | null;
  capMax: number | null;
  consume: boolean | null;
  dedupeId: string | null;
  /** Held by quiet hours: the user's zone and the earliest instant outside them. */
  zone: string | null;
  eligibleAt: number | null;
}

export interface CapWindowAnswer {
  cap: string;
  channel: string;
  windowMs: number;
  max: number;
  /** Counted sends in the window (at − windowMs, at] before the decision, and after it. */
  before: number;
  after: number;
  /** This cap denied the send. */
  bit: boolean;
  /** The sends that filled the window: campaign (null for a check without one), channel, send time. */
  sends: { campaignId: string | null; channel: string; at: number }[];
}

export interface WhyAnswer {
  decision: DecisionRow;
  /** The caps of the user's segment on the channel (from the policy when given; else the cap that bit). */
  caps: CapWindowAnswer[];
}

const NUMBER_FIELDS = ["decidedAt", "at", "userId", "capWindowMs", "capMax", "eligibleAt"] as const;
function rowOf(raw: Record<string, unknown>): DecisionRow {
  const row = { ...raw } as Record<string, unknown>;
  for (const field of NUMBER_FIELDS)
    if (row[field] !== null && row[field] !== undefined) row[field] = Number(row[field]);
  for (const field of ["reason", "zone", "eligibleAt"]) row[field] ??= null;
  return row as unknown as DecisionRow;
}

/** A decision that put a send in the user's windows. */
const counted = (row: DecisionRow) => row.decision === "allowed" && (row.kind === "campaign" || row.consume === true);

/**
 * The user's latest decision (of `campaignId`, on `channel`, when given; repeats of a counted send, the
 * `duplicate`s, are not decisions of their own), and for each cap of it the sends in its window.
 */
export async function why(
  archive: OpenArchive,
  question: { userId: number; campaignId?: string; channel?: string },
  policy?: Pick<Policy, "segments" | "capsFor">,
): Promise<WhyAnswer | undefined> {
  const filters = ["userId = $1", "kind IN ('campaign', 'frequency')", "decision <> 'duplicate'"];
  const values: (string | number)[] = [question.userId];
  if (question.campaignId !== undefined) {
    values.push(question.campaignId);
    filters.push(`campaignId = $${values.length}`);
  }
  if (question.channel !== undefined) {
    values.push(question.channel);
    filters.push(`channel = $${values.length}`);
  }
  const [latest] = await archive.query(
    `SELECT * FROM decisions WHERE ${filters.join(" AND ")} ORDER BY decidedAt DESC, "at" DESC LIMIT 1`,
    values,
  );
  if (!latest) return undefined;
  const decision = rowOf(latest);
  const caps = capsOf(decision, policy);
  const longest = Math.max(0, ...caps.map((cap) => cap.windowMs));
  const history = (
    await archive.query(
      "SELECT * FROM decisions WHERE userId = $1 AND kind IN ('campaign', 'frequency') AND \"at\" > $2 AND \"at\" <= $3",
      [decision.userId, decision.at - longest, decision.at],
    )
  )
    .map(rowOf)
    .filter(counted);
  // one send per identity (a campaign's send may be archived by more than one attempt)
  const seen = new Set<string>();
  const sends = history.filter((row) => {
    const identity = row.dedupeId ?? `${row.kind}:${row.channel}:${row.decidedAt}:${row.at}`;
    if (seen.has(identity)) return false;
    seen.add(identity);
    return true;
  });
  const isOwn = (row: DecisionRow) =>
    row.kind === decision.kind && row.decidedAt === decision.decidedAt && row.dedupeId === decision.dedupeId;
  const ownCounts = counted(decision);
  return {
    decision,
    caps: caps.map((cap) => {
      const inWindow = sends
        .filter((row) => !isOwn(row))
        .filter((row) => (cap.channel === "*" || row.channel === cap.channel) && row.at > decision.at - cap.windowMs)
        .sort((a, b) => a.at - b.at);
      const label = `${cap.channel}:${cap.window}`;
      return {
        cap: label,
        channel: cap.channel,
        windowMs: cap.windowMs,
        max: cap.max,
        before: inWindow.length,
        after: inWindow.length + (ownCounts ? 1 : 0),
        bit: (decision.decision === "capped" || decision.decision === "displaced") && decision.cap === label,
        sends: inWindow.map((row) => ({ campaignId: row.campaignId, channel: row.channel, at: row.at })),
      };
    }),
  };
}

/** The caps to explain: the policy's for the user's segment and channel, else the one the decision names. */
function capsOf(decision: DecisionRow, policy?: Pick<Policy, "segments" | "capsFor">): CapRule[] {
  const segment = policy?.segments.findIndex((one) => one.name === decision.segment) ?? -1;
  if (policy && segment >= 0) return [...policy.capsFor(segment, decision.channel)];
  if (decision.cap === null || decision.capWindowMs === null || decision.capMax === null) return [];
  const [channel, window] = decision.cap.split(":") as [string, string];
  return [{ channel, window, windowMs: decision.capWindowMs, max: decision.capMax }];
}

const iso = (ms: number) => new Date(ms).toISOString();

export function whyText(answer: WhyAnswer | undefined, question: { userId: number }): string {
  if (!answer) return `no archived decision for user ${question.userId}`;
  const { decision } = answer;
  const lines = [
    `user ${decision.userId}, ${decision.campaignId ? `campaign ${decision.campaignId}` : "a check"}, channel ${decision.channel}: ` +
      `${decision.decision} at ${iso(decision.at)} (segment ${decision.segment}${decision.policyVersion ? `, policy ${decision.policyVersion}` : ""})`,
  ];
  if (decision.reason === "quiet_hours")
    lines.push(
      `  held by quiet hours in ${decision.zone ?? "the default zone"}` +
        (decision.eligibleAt === null ? "" : `: eligible at ${iso(decision.eligibleAt)}`) +
        (decision.decision === "deferred"
          ? " (deferred to then)"
          : decision.decision === "dropped"
            ? " (dropped: past the deferral bound)"
            : " (not sent)"),
    );
  if (answer.caps.length === 0) lines.push("  no cap applies");
  for (const cap of answer.caps) {
    lines.push(
      `  ${cap.bit ? (decision.decision === "displaced" ? "displaced by the reserve of" : "capped by") : "cap"} ${cap.cap} (max ${cap.max}): ${cap.before} sends in the window before, ${cap.after} after`,
    );
    for (const send of cap.sends) lines.push(`    ${iso(send.at)}  ${send.campaignId ?? "(check)"}  ${send.channel}`);
  }
  return lines.join("\n");
}

export interface CampaignReport {
  campaignId: string;
  /** Per segment: sends by decision, and capped sends by the cap that bit. */
  segments: {
    segment: string;
    sent: number;
    capped: number;
    duplicate: number;
    exempt: number;
    cappedBy: Record<string, number>;
    /** Refused by room a cap keeps for higher priorities, and by the cap whose reserve it was. */
    displaced: number;
    displacedBy: Record<string, number>;
    /** Held by quiet hours: not sent (`quiet`), deferred, dropped past the deferral bound. */
    quiet: number;
    deferred: number;
    dropped: number;
    /** The held sends by the user's zone. */
    heldByZone: Record<string, { quiet: number; deferred: number; dropped: number }>;
  }[];
  total: {
    sent: number;
    capped: number;
    displaced: number;
    duplicate: number;
    exempt: number;
    quiet: number;
    deferred: number;
    dropped: number;
  };
}

/** The campaigns the archive holds decisions of, the latest decided first. */
export async function archivedCampaigns(
  archive: OpenArchive,
): Promise<{ campaignId: string; lastDecidedAt: number }[]> {
  const rows = await archive.query<{ campaignId: string; last: string }>(
    `SELECT campaignId, CAST(max(decidedAt) AS DOUBLE) AS last FROM decisions
     WHERE kind = 'campaign' AND campaignId IS NOT NULL GROUP BY campaignId ORDER BY last DESC, campaignId`,
  );
  return rows.map((row) => ({ campaignId: row.campaignId, lastDecidedAt: Number(row.last) }));
}

/** A campaign's decisions, one per send identity, by segment and cap. */
export async function campaignReport(archive: OpenArchive, campaignId: string): Promise<CampaignReport> {
  const rows = await archive.query<{
    segment: string;
    decision: string;
    cap: string | null;
    zone: string | null;
    n: string;
  }>(
    `SELECT segment, decision, cap, zone, CAST(count(DISTINCT dedupeId) AS DOUBLE) AS n FROM decisions
     WHERE kind = 'campaign' AND campaignId = $1 GROUP BY segment, decision, cap, zone
     ORDER BY segment, decision, cap, zone`,
    [campaignId],
  );
  const bySegment = new Map<string, CampaignReport["segments"][number]>();
  const total = { sent: 0, capped: 0, displaced: 0, duplicate: 0, exempt: 0, quiet: 0, deferred: 0, dropped: 0 };
  for (const row of rows) {
    let segment = bySegment.get(row.segment);
    if (!segment) {
      segment = {
        segment: row.segment,
        sent: 0,
        capped: 0,
        duplicate: 0,
        exempt: 0,
        cappedBy: {},
        displaced: 0,
        displacedBy: {},
        quiet: 0,
        deferred: 0,
        dropped: 0,
        heldByZone: {},
      };
      bySegment.set(row.segment, segment);
    }
    const n = Number(row.n);
    // an exempt send is sent too; the report names it apart
    const field = row.decision === "allowed" ? "sent" : (row.decision as Exclude<keyof typeof total, "sent">);
    segment[field] += n;
    total[field] += n;
    if (field === "quiet" || field === "deferred" || field === "dropped") {
      const zone = row.zone ?? "(default zone)";
      const held = segment.heldByZone[zone] ?? { quiet: 0, deferred: 0, dropped: 0 };
      segment.heldByZone[zone] = held;
      held[field] += n;
    }
    if (row.decision === "exempt") {
      segment.sent += n;
      total.sent += n;
    }
    if (row.decision === "capped" && row.cap) segment.cappedBy[row.cap] = (segment.cappedBy[row.cap] ?? 0) + n;
    if (row.decision === "displaced" && row.cap) segment.displacedBy[row.cap] = (segment.displacedBy[row.cap] ?? 0) + n;
  }
  return { campaignId, segments: [...bySegment.values()], total };
}

/** The report as a table and a bar per segment (█ sent, ░ capped), 40 characters at the largest. */
export function campaignReportText(report: CampaignReport): string {
  if (report.segments.length === 0) return `no archived decision for campaign ${report.campaignId}`;
  const width = Math.max(...report.segments.map((s) => s.sent + s.capped), 1);
  const name = Math.max(7, ...report.segments.map((s) => s.segment.length));
  const lines = [
    `campaign ${report.campaignId}`,
    `${"segment".padEnd(name)}  ${"sent".padStart(8)}  ${"capped".padStart(8)}  ${"repeats".padStart(8)}  chart`,
  ];
  for (const s of report.segments) {
    const sent = Math.round((s.sent / width) * 40);
    const capped = Math.round((s.capped / width) * 40);
    lines.push(
      `${s.segment.padEnd(name)}  ${String(s.sent).padStart(8)}  ${String(s.capped).padStart(8)}  ${String(s.duplicate).padStart(8)}  ${"█".repeat(sent)}${"░".repeat(capped)}`,
    );
    for (const [cap, n] of Object.entries(s.cappedBy)) lines.push(`${"".padEnd(name)}    capped by ${cap}: ${n}`);
    for (const [cap, n] of Object.entries(s.displacedBy))
      lines.push(`${"".padEnd(name)}    displaced by the reserve of ${cap}: ${n}`);
    for (const [zone, held] of Object.entries(s.heldByZone))
      lines.push(
        `${"".padEnd(name)}    quiet hours in ${zone}: ${held.quiet} not sent, ${held.deferred} deferred, ${held.dropped} dropped`,
      );
  }
  const { total } = report;
  lines.push(
    `${"total".padEnd(name)}  ${String(total.sent).padStart(8)}  ${String(total.capped).padStart(8)}  ${String(total.duplicate).padStart(8)}`,
  );
  lines.push("█ sent  ░ capped; repeats: sends decided again (counted once)");
  return lines.join("\n");
}
