// The checker of the quiet-hours pipeline scenarios, from the contract of docs/quiet-hours.md alone: what is
// quiet is worked out here with Intl (the user's local weekday-free wall-clock time), not by the product's
// code. It judges the deliveries (each with when the delivery queue received it), the consumers' reports of
// the sends they did not deliver, the DLQ, what was pushed and the policy.
import type { CapRule, DeadLetteredMessage, PushedMessage } from "./pipeline-checker.ts";

/** A pushed campaign message of this family: `deferMaxMs` when its batches say `defer: { maxMs }`. */
export interface QuietPushed extends PushedMessage {
  deferMaxMs?: number | undefined;
}

/** One send of a delivery message, with when the delivery queue took it (the harness's clock, ms). */
export interface TimedDelivery {
  seq: number;
  campaignId: string;
  channel: string;
  userId: number;
  dedupeId: string;
  sentAt: number;
}

/** A send a consumer decided and did not deliver: `capped`, `quiet`, `deferred` or `dropped` (with `byCap`). */
export interface HeldReport {
  seq: number;
  userId: number;
  decision: "capped" | "quiet" | "deferred" | "dropped";
  /** Deferred or dropped by a cap (not by quiet hours). */
  byCap: boolean;
  /** When the consumer had decided it (the harness's clock, ms). */
  decidedAt: number;
}

export interface QuietContract {
  caps: readonly CapRule[];
  /** The channel quiet hours apply to, their windows (local wall-clock time) and each user's zone. */
  channel: string;
  windows: readonly { from: string; to: string }[];
  zoneOf: (userId: number) => string;
}

export interface QuietOutput {
  pushed: QuietPushed[];
  delivered: TimedDelivery[];
  reports: HeldReport[];
  deadLettered: DeadLetteredMessage[];
}

export type QuietRule = "quiet" | "deferral" | "lost" | "dedupe" | "window" | "run";

export interface QuietVerdict {
  rule: QuietRule;
  pass: boolean;
  detail: string;
}

export interface QuietFigures {
  pushedSends: number;
  /** Pushed sends whose `at` was quiet for their user (on the quiet channel). */
  pushedInQuiet: number;
  delivered: number;
  repeats: number;
  /** Distinct sends reported deferred by quiet hours, of them delivered later; deferred by a cap. */
  deferredQuiet: number;
  deferredDelivered: number;
  deferredByCap: number;
  /** Distinct sends whose last word was a drop (quiet hours or a cap), `quiet` (no defer), `capped`. */
  dropped: number;
  quiet: number;
  capped: number;
  deadLettered: number;
  deliveredInQuiet: number;
  deliveredEarly: number;
  pastBound: number;
  droppedWithinBound: number;
  lost: number;
  badDedupe: number;
  windowsOverMax: number;
  worst: { userId: number; cap: CapRule; sends: number } | undefined;
}

export interface QuietCheck {
  figures: QuietFigures;
  verdicts: QuietVerdict[];
  pass: boolean;
}

const MINUTE = 60_000;
const formatters = new Map<string, Intl.DateTimeFormat>();

/** Minutes since local midnight of `instant` in `zone`, as Intl names the local time. */
export function localMinutes(instant: number, zone: string): number {
  let format = formatters.get(zone);
  if (!format) {
    format = new Intl.DateTimeFormat("en-US", { timeZone: zone, hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
    formatters.set(zone, format);
  }
  let hour = 0;
  let minute = 0;
  for (const part of format.formatToParts(instant)) {
    if (part.type === "hour") hour = Number(part.value);
    if (part.type === "minute") minute = Number(part.value);
  }
  return hour * 60 + minute;
}

const minutesOf = (hhmm: string) => Number(hhmm.slice(0, 2)) * 60 + Number(hhmm.slice(3, 5));

/** Inside a window: from `from` to `to` local, across midnight when `to` ≤ `from`. */
export function isQuiet(instant: number, zone: string, windows: QuietContract["windows"]): boolean {
  const m = localMinutes(instant, zone);
  return windows.some((w) => {
    const from = minutesOf(w.from);
    const to = minutesOf(w.to);
    return to > from ? m >= from && m < to : m >= from || m < to;
  });
}

const eligibleCache = new Map<string, number>();

/**
 * The first instant at or after `instant` that is not quiet: `instant` itself, or the first local minute
 * boundary after it that is free (every zone's offset is whole minutes), walked minute by minute.
 */
export function firstFreeInstant(instant: number, zone: string, windows: QuietContract["windows"]): number {
  if (!isQuiet(instant, zone, windows)) return instant;
  const key = `${zone}|${Math.floor(instant / MINUTE)}|${JSON.stringify(windows)}`;
  const known = eligibleCache.get(key);
  if (known !== undefined) return known;
  let t = Math.floor(instant / MINUTE) * MINUTE + MINUTE;
  for (let i = 0; i < 8 * 24 * 60 && isQuiet(t, zone, windows); i++) t += MINUTE;
  eligibleCache.set(key, t);
  return t;
}

const appliesTo = (cap: CapRule, channel: string) => cap.channel === "*" || cap.channel === channel;

export function checkQuietPipeline(output: QuietOutput, contract: QuietContract): QuietCheck {
  const bySeq = new Map(output.pushed.map((m) => [m.seq, m]));
  const keyOf = (seq: number, userId: number) => `${seq}/${userId}`;
  const freeAt = (m: QuietPushed, userId: number) =>
    m.channel === contract.channel ? firstFreeInstant(m.at, contract.zoneOf(userId), contract.windows) : m.at;
  const reportsOf = new Map<string, HeldReport[]>();
  for (const r of output.reports) {
    const list = reportsOf.get(keyOf(r.seq, r.userId)) ?? [];
    list.push(r);
    reportsOf.set(keyOf(r.seq, r.userId), list);
  }
  const examples: Record<string, string[]> = {};
  const note = (rule: string, text: string) => {
    const list = examples[rule] ?? [];
    if (list.length < 3) list.push(text);
    examples[rule] = list;
  };

  // quiet and deferral: a delivery is decided at or after its message's `at` and before the delivery queue
  // took it, so one taken before the first free instant at or after `at` was decided inside quiet hours;
  // one whose night ended more than maxMs after its first hold should have been dropped
  let deliveredInQuiet = 0;
  let deliveredEarly = 0;
  let pastBound = 0;
  for (const d of output.delivered) {
    const m = bySeq.get(d.seq);
    if (!m) continue;
    const free = freeAt(m, d.userId);
    const held = (reportsOf.get(keyOf(d.seq, d.userId)) ?? []).filter(
      (r) => !r.byCap && (r.decision === "deferred" || r.decision === "dropped"),
    );
    if (d.sentAt < free) {
      if (held.length > 0) deliveredEarly++;
      else deliveredInQuiet++;
      note(held.length > 0 ? "deferral" : "quiet", `user ${d.userId} of message ${d.seq} ${free - d.sentAt} ms early`);
      continue;
    }
    const firstHold = Math.min(...held.map((r) => r.decidedAt));
    if (m.deferMaxMs !== undefined && free > m.at && held.length > 0 && free - firstHold > m.deferMaxMs) {
      pastBound++;
      note("deferral", `user ${d.userId} of message ${d.seq} delivered ${free - firstHold} ms past its first hold`);
    }
  }
  // a drop by quiet hours whose night, quiet at the message's `at`, ended within maxMs of it (so of any first
  // hold); a drop of a send whose `at` was free is judged by the later clock, which may be in the next night
  let droppedWithinBound = 0;
  const droppedQuiet = new Set<string>();
  for (const r of output.reports) {
    if (r.decision !== "dropped" || r.byCap) continue;
    const m = bySeq.get(r.seq);
    if (!m || m.deferMaxMs === undefined || droppedQuiet.has(keyOf(r.seq, r.userId))) continue;
    droppedQuiet.add(keyOf(r.seq, r.userId));
    const free = freeAt(m, r.userId);
    // `at` quiet: every first hold lies in that night, at most `free − at` before its end
    if (free > m.at && free - m.at <= m.deferMaxMs) {
      droppedWithinBound++;
      note("deferral", `user ${r.userId} of message ${r.seq} dropped though its night ended within maxMs`);
    }
  }

  // lost: every pushed send delivered (under its dedupe id), reported with a last word, or dead-lettered
  const deliveredIds = new Set(output.delivered.map((d) => d.dedupeId));
  const withReason = new Set(output.deadLettered.filter((d) => d.reason !== "").map((d) => d.seq));
  const final = new Set(output.reports.filter((r) => r.decision !== "deferred").map((r) => keyOf(r.seq, r.userId)));
  let pushedSends = 0;
  let pushedInQuiet = 0;
  let lost = 0;
  for (const m of output.pushed) {
    for (const userId of new Set(m.userIds)) {
      pushedSends++;
      if (freeAt(m, userId) > m.at) pushedInQuiet++;
      if (deliveredIds.has(`${m.campaignId}:${m.channel}:${userId}`)) continue;
      if (final.has(keyOf(m.seq, userId)) || withReason.has(m.seq)) continue;
      lost++;
      note("lost", `user ${userId} of message ${m.seq}`);
    }
  }

  // dedupe: one dedupe id per send, `campaignId:channel:userId`
  let badDedupe = 0;
  for (const d of output.delivered) {
    if (d.dedupeId !== `${d.campaignId}:${d.channel}:${d.userId}`) {
      badDedupe++;
      note("dedupe", `${d.dedupeId} for user ${d.userId} of ${d.campaignId}`);
    }
  }

  // window: each dedupe id counted once, at an instant between its message's `at` (a deferral counts at its
  // eligibleAt, later) and when its first copy reached the delivery queue; a (user, cap) is over max when
  // more than max of its sends lie, whatever their instants in those bounds, in one window
  const spans = new Map<string, { userId: number; channel: string; lo: number; hi: number }>();
  for (const d of output.delivered) {
    const m = bySeq.get(d.seq);
    if (!m) continue;
    const span = spans.get(d.dedupeId);
    if (span) span.hi = Math.min(span.hi, d.sentAt);
    else spans.set(d.dedupeId, { userId: d.userId, channel: d.channel, lo: m.at, hi: d.sentAt });
  }
  let windowsOverMax = 0;
  let worst: QuietFigures["worst"];
  const byUser = new Map<number, { channel: string; lo: number; hi: number }[]>();
  for (const s of spans.values()) byUser.set(s.userId, [...(byUser.get(s.userId) ?? []), s]);
  for (const [userId, list] of byUser) {
    for (const cap of contract.caps) {
      const mine = list.filter((s) => appliesTo(cap, s.channel));
      let sends = 0;
      for (const first of mine)
        sends = Math.max(sends, mine.filter((s) => s.lo >= first.lo && s.hi < first.lo + cap.windowMs).length);
      if (sends > cap.max) {
        windowsOverMax++;
        note("window", `user ${userId}: ${sends} sends of max ${cap.max} in one ${cap.channel} window`);
      }
      if (!worst || sends / cap.max > worst.sends / worst.cap.max) worst = { userId, cap, sends };
    }
  }

  const distinct = (pick: (r: HeldReport) => boolean) =>
    new Set(output.reports.filter(pick).map((r) => keyOf(r.seq, r.userId)));
  const deferredQuiet = distinct((r) => r.decision === "deferred" && !r.byCap);
  const deliveredKeys = new Set(output.delivered.map((d) => keyOf(d.seq, d.userId)));
  const figures: QuietFigures = {
    pushedSends,
    pushedInQuiet,
    delivered: deliveredIds.size,
    repeats: output.delivered.length - deliveredIds.size,
    deferredQuiet: deferredQuiet.size,
    deferredDelivered: [...deferredQuiet].filter((k) => deliveredKeys.has(k)).length,
    deferredByCap: distinct((r) => r.decision === "deferred" && r.byCap).size,
    dropped: distinct((r) => r.decision === "dropped").size,
    quiet: distinct((r) => r.decision === "quiet").size,
    capped: distinct((r) => r.decision === "capped").size,
    deadLettered: output.deadLettered.length,
    deliveredInQuiet,
    deliveredEarly,
    pastBound,
    droppedWithinBound,
    lost,
    badDedupe,
    windowsOverMax,
    worst,
  };
  const withExamples = (rule: string, text: string) =>
    examples[rule]?.length ? `${text} (${(examples[rule] as string[]).join("; ")})` : text;
  const verdicts: QuietVerdict[] = [
    {
      rule: "quiet",
      pass: deliveredInQuiet === 0,
      detail: withExamples("quiet", `${deliveredInQuiet} deliveries decided inside their user's quiet hours`),
    },
    {
      rule: "deferral",
      pass: deliveredEarly + pastBound + droppedWithinBound === 0,
      detail: withExamples(
        "deferral",
        `${deliveredEarly} deferred sends delivered before their eligibleAt, ${pastBound} delivered past maxMs, ${droppedWithinBound} dropped within it`,
      ),
    },
    {
      rule: "lost",
      pass: lost === 0,
      detail: withExamples(
        "lost",
        `${lost} of ${pushedSends} pushed sends neither delivered, reported nor dead-lettered`,
      ),
    },
    { rule: "dedupe", pass: badDedupe === 0, detail: withExamples("dedupe", `${badDedupe} sends under another id`) },
    {
      rule: "window",
      pass: windowsOverMax === 0,
      detail: withExamples(
        "window",
        worst ? `fullest ${worst.sends} of max ${worst.cap.max} (${worst.cap.channel})` : "no send delivered",
      ),
    },
  ];
  return { figures, verdicts, pass: verdicts.every((v) => v.pass) };
}
