// The dense campaign of the capping and pipeline sections: BENCH_USERS users, 4 segments and the unsegmented
// rest, caps 1/1d and 2/7d, decided in 10,000-user batches from a fixed clock.
import { parsePolicy } from "../../functions/core/capping/policy.ts";

export const USERS = Number(process.env.BENCH_USERS ?? 1_000_000);
export const BATCH = 10_000;
export const DAY = 86_400_000;
/** The bench's clock starts here (a Monday, 09:00 UTC). */
export const T0 = Date.UTC(2026, 10, 2, 9);
export const SEGMENTS = ["new", "active", "dormant", "vip"];
const CAPS = {
  push: [
    { window: "1d", max: 1 },
    { window: "7d", max: 2 },
  ],
};

/** The user's segment: an index into SEGMENTS, or SEGMENTS.length for the unsegmented rest. */
export const segmentOfUser = (id: number) => (Math.imul(id, 0x9e3779b1) >>> 0) % (SEGMENTS.length + 1);

/** The campaign's policy file: the same caps in every segment and in the rest. */
export const policyDocument = () => ({
  version: "bench",
  channels: ["push"],
  segments: SEGMENTS.map((name) => ({ name, bitmap: `segments/${name}.roaring`, caps: CAPS })),
  default: { name: "unsegmented", caps: CAPS },
});

export const campaignPolicy = () => parsePolicy(policyDocument());
