// The quiet-hours family of pipeline scenarios (`pipeline-quiet/<nemesis>`): users in four zones and the
// default one, quiet hours 21:00-08:00 on `inapp`, and a seeded stream of campaigns most of which defer. The
// consumers decide by the harness's clock, which reads QUIET_EDGE − QUIET_LEAD_MS when the stream starts: at
// QUIET_EDGE New York's night ends and Shanghai's begins, so a run of seconds sees sends held, deferred by SQS
// delay to the end of the night and re-decided, others dropped past `maxMs`, and others delivered.
import type { CapRule } from "./pipeline-checker.ts";
import { PIPELINE_POLICY, PIPELINE_USERS } from "./pipeline-input.ts";
import { seededRandom } from "./seeded.ts";

/** 2027-01-15 13:00 UTC: 08:00 in New York, 21:00 in Shanghai, 22:00 in Tokyo, 18:30 in Kolkata. */
export const QUIET_EDGE = Date.UTC(2027, 0, 15, 13, 0, 0);
/** The harness's clock reads QUIET_EDGE less this when the stream starts. */
export const QUIET_LEAD_MS = 6000;
export const QUIET_CHANNEL = "inapp";
export const QUIET_WINDOWS: readonly { from: string; to: string }[] = [{ from: "21:00", to: "08:00" }];
export const QUIET_ZONES = ["America/New_York", "Asia/Shanghai", "Asia/Tokyo", "Asia/Kolkata"] as const;
/** The bound of the deferring campaigns: New York's held sends fit in it, Tokyo's and Shanghai's do not. */
export const QUIET_MAX_MS = 8000;

/** The zone of the user at `index` of PIPELINE_USERS: four zones in turn, every fifth user in none (UTC). */
export function quietZoneOf(userId: number): string {
  const index = PIPELINE_USERS.indexOf(userId);
  return QUIET_ZONES[index % 5] ?? "UTC";
}

/** The zones' members, as the rules bucket holds them (`zones/<zone>.roaring`). */
export function quietZoneMembers(): { name: string; userIds: number[] }[] {
  return QUIET_ZONES.map((zone) => ({ name: zone, userIds: PIPELINE_USERS.filter((u) => quietZoneOf(u) === zone) }));
}

/**
 * The policy every pipeline scenario's consumers run: PIPELINE_POLICY with zones, and quiet hours and a cap
 * on inapp, a channel only this family's campaigns use (push and email have no quiet hours, so the other
 * scenarios' batches resolve no zone).
 */
export const PIPELINE_POLICY_WITH_QUIET = {
  ...PIPELINE_POLICY,
  channels: [...PIPELINE_POLICY.channels, QUIET_CHANNEL],
  default: {
    ...PIPELINE_POLICY.default,
    caps: { ...PIPELINE_POLICY.default.caps, [QUIET_CHANNEL]: [{ window: "2s", max: 1 }] },
  },
  defaultZone: "UTC",
  zones: [...QUIET_ZONES],
  quietHours: { [QUIET_CHANNEL]: QUIET_WINDOWS.map((w) => ({ ...w })) },
};

/** The caps as the checker reads them: inapp's own, email's and "*" (the policy's default segment). */
export const QUIET_CAPS: readonly CapRule[] = [
  { channel: QUIET_CHANNEL, windowMs: 2_000, max: 1 },
  { channel: "email", windowMs: 3_000, max: 1 },
  { channel: "*", windowMs: 60_000, max: 8 },
];

export interface QuietCampaign {
  offsetMs: number;
  campaignId: string;
  channel: string;
  messages: number[][];
  /** `defer.maxMs` of its batches, when it defers. */
  deferMaxMs: number | undefined;
}

/** A campaign every `gapMs` over `durationMs`: ¾ on inapp, 9 in 10 deferring, each user in with probability 0.4. */
export function quietStream(seed: number, durationMs: number, gapMs = 400): QuietCampaign[] {
  const random = seededRandom(seed);
  const campaigns: QuietCampaign[] = [];
  for (let k = 0; k * gapMs < durationMs; k++) {
    const users = PIPELINE_USERS.filter(() => random() < 0.4);
    const split = Math.floor(random() * (users.length + 1));
    const messages = [users.slice(0, split), users.slice(split)];
    if (split > 0 && random() < 0.4) messages[1]?.push(users[Math.floor(random() * split)] as number);
    campaigns.push({
      offsetMs: k * gapMs,
      campaignId: `q${k}`,
      channel: random() < 0.75 ? QUIET_CHANNEL : "email",
      messages: messages.filter((m) => m.length > 0),
      deferMaxMs: random() < 0.9 ? QUIET_MAX_MS : undefined,
    });
  }
  return campaigns;
}
