// The campaign pipeline's checker: judges what came out of a run (the delivery queue drained, the DLQ, the
// capped decisions the consumers reported) against what was pushed and the contract of docs/api.md alone
// (Messages; Policy: rolling windows, decision 0008). Nothing here knows how the consumer or the script decide.

/** One campaign message as pushed: `seq` travels in its payload, so every send out names the message it came from. */
export interface PushedMessage {
  seq: number;
  campaignId: string;
  channel: string;
  userIds: number[];
  /** The send time the batch names (ms since the epoch): the time its sends count at. */
  at: number;
}

/** One send of one delivery message. */
export interface DeliveredSend {
  seq: number;
  campaignId: string;
  channel: string;
  userId: number;
  dedupeId: string;
}

/** A `capped` decision a consumer reported for one user of one message, with the cap it names. */
export interface CappedSend {
  seq: number;
  userId: number;
  cap: { channel: string; windowMs: number; max: number };
  /** When the consumer had decided it (its clock, ms: the true one unless the scenario offsets it), if it said. */
  decidedAt?: number;
}

/** A message found on the campaign DLQ, with its `reason` attribute ("" when SQS redrove it with none). */
export interface DeadLetteredMessage {
  seq: number;
  reason: string;
}

/** A cap of the policy the users are under: `channel` "*" counts every channel's sends. */
export interface CapRule {
  channel: string;
  windowMs: number;
  max: number;
}

export interface PipelineOutput {
  pushed: PushedMessage[];
  delivered: DeliveredSend[];
  capped: CappedSend[];
  deadLettered: DeadLetteredMessage[];
}

export interface PipelineFigures {
  pushedSends: number;
  /** Distinct sends delivered (by dedupe id), and the copies past the first (the delivery side drops them). */
  delivered: number;
  repeats: number;
  capped: number;
  deadLettered: number;
  /** The fullest rolling window of any (user, cap): sends in it and the cap's max. */
  worst: { userId: number; cap: CapRule; sends: number; at: number } | undefined;
  windowsOverMax: number;
  lost: number;
  /** Sends delivered under a dedupe id that is not `campaignId:channel:userId`, or one send under two ids. */
  badDedupe: number;
  /** Capped while every window around the send held fewer than max delivered sends. */
  countedTwice: number;
}

export interface PipelineVerdict {
  /** "loss": a data-loss run's detection, pause and recovery (pipeline-loss-checker.ts). */
  rule: "window" | "lost" | "dedupe" | "counted-twice" | "run" | "loss";
  pass: boolean;
  detail: string;
}

export interface PipelineCheck {
  figures: PipelineFigures;
  verdicts: PipelineVerdict[];
  pass: boolean;
}

const appliesTo = (cap: CapRule, channel: string) => cap.channel === "*" || cap.channel === channel;
const sendKey = (campaignId: string, channel: string, userId: number) => `${campaignId}:${channel}:${userId}`;

/**
 * The counted sends: each dedupe id once (the contract's "nothing counted twice", and the delivery side's view),
 * at the time of the message it came in. Every message of a campaign names the same `at`, so a send's time
 * does not depend on which copy arrived first.
 */
export function countedSends(output: PipelineOutput): Map<number, { channel: string; at: number }[]> {
  const atOf = new Map(output.pushed.map((m) => [m.seq, m.at]));
  const seen = new Set<string>();
  const byUser = new Map<number, { channel: string; at: number }[]>();
  for (const send of output.delivered) {
    if (seen.has(send.dedupeId)) continue;
    seen.add(send.dedupeId);
    const at = atOf.get(send.seq);
    if (at === undefined) continue;
    const list = byUser.get(send.userId) ?? [];
    list.push({ channel: send.channel, at });
    byUser.set(send.userId, list);
  }
  return byUser;
}

/**
 * The fullest window `(x − W, x]` of sorted times `times`: the count only rises at a send's time, so the
 * windows ending at each send are the ones to try (docs/decisions/0008).
 */
export function fullestWindow(times: readonly number[], windowMs: number): { sends: number; at: number } {
  let best = { sends: 0, at: 0 };
  let first = 0;
  for (let last = 0; last < times.length; last++) {
    while ((times[first] as number) <= (times[last] as number) - windowMs) first++;
    const sends = last - first + 1;
    if (sends > best.sends) best = { sends, at: times[last] as number };
  }
  return best;
}

/** Sends in the fullest window of length `windowMs` that contains `t`, among sorted `times`. */
export function fullestAround(times: readonly number[], windowMs: number, t: number): number {
  let best = 0;
  // the right end x runs from t to t + W − 1; the count of (x − W, x] only rises at x = t and at a send's time
  const ends = [t, ...times.filter((x) => x > t && x < t + windowMs)];
  for (const x of ends) {
    const sends = times.filter((s) => s > x - windowMs && s <= x).length;
    if (sends > best) best = sends;
  }
  return best;
}

export function checkPipeline(output: PipelineOutput, caps: readonly CapRule[]): PipelineCheck {
  const counted = countedSends(output);
  const atOf = new Map(output.pushed.map((m) => [m.seq, m.at]));
  const channelOf = new Map(output.pushed.map((m) => [m.seq, m.channel]));

  // window: no rolling window of a (user, cap) holds more than max counted sends
  let worst: PipelineFigures["worst"];
  let windowsOverMax = 0;
  for (const [userId, sends] of counted) {
    for (const cap of caps) {
      const times = sends
        .filter((s) => appliesTo(cap, s.channel))
        .map((s) => s.at)
        .sort((a, b) => a - b);
      const fullest = fullestWindow(times, cap.windowMs);
      if (fullest.sends > cap.max) windowsOverMax++;
      if (!worst || fullest.sends / Math.max(cap.max, 1) > worst.sends / Math.max(worst.cap.max, 1))
        worst = { userId, cap, ...fullest };
    }
  }

  // lost: every pushed (message, user) ends delivered, capped, or its message on the DLQ with a reason
  const delivered = new Set(output.delivered.map((s) => `${s.seq}/${s.userId}`));
  const capped = new Set(output.capped.map((s) => `${s.seq}/${s.userId}`));
  const withReason = new Set(output.deadLettered.filter((d) => d.reason !== "").map((d) => d.seq));
  let lost = 0;
  let pushedSends = 0;
  const lostExamples: string[] = [];
  for (const message of output.pushed) {
    for (const userId of new Set(message.userIds)) {
      pushedSends++;
      const key = `${message.seq}/${userId}`;
      if (delivered.has(key) || capped.has(key) || withReason.has(message.seq)) continue;
      lost++;
      if (lostExamples.length < 3) lostExamples.push(`user ${userId} of message ${message.seq}`);
    }
  }

  // dedupe: a send's dedupe id is its identity, one per (campaign, channel, user)
  const idsOf = new Map<string, Set<string>>();
  let badDedupe = 0;
  for (const send of output.delivered) {
    const identity = sendKey(send.campaignId, send.channel, send.userId);
    if (send.dedupeId !== identity) badDedupe++;
    const ids = idsOf.get(identity) ?? new Set<string>();
    ids.add(send.dedupeId);
    idsOf.set(identity, ids);
  }
  for (const ids of idsOf.values()) if (ids.size > 1) badDedupe += ids.size - 1;
  const distinct = new Set(output.delivered.map((s) => s.dedupeId)).size;

  // counted twice: a capped send's cap was full, so some window around it held max counted sends; counted
  // sends are delivered (nothing counted that is not forwarded), so fewer delivered there means a send the
  // store counted that never went out, or one it counted twice
  let countedTwice = 0;
  const countedExamples: string[] = [];
  for (const c of output.capped) {
    const at = atOf.get(c.seq);
    const channel = channelOf.get(c.seq);
    if (at === undefined || channel === undefined) continue;
    const own = sendKey(output.pushed.find((m) => m.seq === c.seq)?.campaignId ?? "", channel, c.userId);
    const times = (counted.get(c.userId) ?? [])
      .filter((s) => appliesTo(c.cap, s.channel))
      .map((s) => s.at)
      .sort((a, b) => a - b);
    // the send itself, delivered by a later attempt, is not what filled its own cap
    const others = idsOf.has(own) ? withoutOne(times, at) : times;
    if (fullestAround(others, c.cap.windowMs, at) >= c.cap.max) continue;
    countedTwice++;
    if (countedExamples.length < 3) countedExamples.push(`user ${c.userId} of message ${c.seq}`);
  }

  const figures: PipelineFigures = {
    pushedSends,
    delivered: distinct,
    repeats: output.delivered.length - distinct,
    capped: new Set(output.capped.map((c) => `${c.seq}/${c.userId}`)).size,
    deadLettered: output.deadLettered.length,
    worst,
    windowsOverMax,
    lost,
    badDedupe,
    countedTwice,
  };
  const verdicts: PipelineVerdict[] = [
    {
      rule: "window",
      pass: windowsOverMax === 0,
      detail: worst
        ? `fullest window ${worst.sends} of max ${worst.cap.max} (user ${worst.userId}, ${worst.cap.channel} per ${worst.cap.windowMs} ms); ${windowsOverMax} (user, cap) over max`
        : "no send delivered",
    },
    {
      rule: "lost",
      pass: lost === 0,
      detail: `${lost} of ${pushedSends} pushed sends neither delivered, capped nor dead-lettered with a reason${lostExamples.length ? ` (${lostExamples.join(", ")})` : ""}`,
    },
    { rule: "dedupe", pass: badDedupe === 0, detail: `${badDedupe} sends under a dedupe id not their own` },
    {
      rule: "counted-twice",
      pass: countedTwice === 0,
      detail: `${countedTwice} capped with room in every window around them${countedExamples.length ? ` (${countedExamples.join(", ")})` : ""}`,
    },
  ];
  return { figures, verdicts, pass: verdicts.every((v) => v.pass) };
}

function withoutOne(times: readonly number[], at: number): number[] {
  const i = times.indexOf(at);
  return i < 0 ? [...times] : [...times.slice(0, i), ...times.slice(i + 1)];
}
