// The campaign stream of a pipeline scenario: its policy (rolling caps on two channels and "*"), and a seeded
// schedule of campaigns, each on one channel with one send time, its users split over several messages, some
// repeated in another message of the same campaign (the same dedupe id), users repeated across campaigns.
import type { CapRule } from "./pipeline-checker.ts";
import { seededRandom } from "./seeded.ts";

/** The policy the consumers run: the default segment only, so every user is under the same caps. */
export const PIPELINE_POLICY = {
  version: "chaos-pipeline",
  channels: ["push", "email"],
  segments: [],
  default: {
    name: "everyone",
    caps: {
      push: [
        { window: "2s", max: 1 },
        { window: "5s", max: 2 },
      ],
      email: [{ window: "3s", max: 1 }],
      "*": [{ window: "1m", max: 8 }],
    },
  },
};

/** The same caps as the checker reads them (docs/api.md: windows are rolling; "*" counts every channel). */
export const PIPELINE_CAPS: readonly CapRule[] = [
  { channel: "push", windowMs: 2_000, max: 1 },
  { channel: "push", windowMs: 5_000, max: 2 },
  { channel: "email", windowMs: 3_000, max: 1 },
  { channel: "*", windowMs: 60_000, max: 8 },
];

/** The users: one per cap hash tag (1,024 users apart), so their keys spread over every primary. */
export const PIPELINE_USERS = Array.from({ length: 24 }, (_, i) => i * 1024 + (i % 7));

export interface PlannedCampaign {
  /** When it is pushed, ms after the stream starts. */
  offsetMs: number;
  campaignId: string;
  channel: string;
  /** Its messages' user IDs. */
  messages: number[][];
}

/** A campaign every `gapMs` over `durationMs`, drawn from `seed`. */
export function campaignStream(seed: number, durationMs: number, gapMs = 250): PlannedCampaign[] {
  const random = seededRandom(seed);
  const campaigns: PlannedCampaign[] = [];
  for (let k = 0; k * gapMs < durationMs; k++) {
    const users = PIPELINE_USERS.filter(() => random() < 0.5);
    const split = Math.floor(random() * (users.length + 1));
    const messages = [users.slice(0, split), users.slice(split)];
    // a user of the first message named again in the second: its dedupe id repeats
    if (split > 0 && random() < 0.4) messages[1]?.push(users[Math.floor(random() * split)] as number);
    campaigns.push({
      offsetMs: k * gapMs,
      campaignId: `c${k}`,
      channel: random() < 0.6 ? "push" : "email",
      messages: messages.filter((m) => m.length > 0),
    });
  }
  return campaigns;
}
