// Record blobs under hostile user IDs (bytes that straddle other IDs, pattern specials, NUL, edges): the
// IDs, a step generator and a runner that checks every answer against the capping model. Shared by the
// integration tests and the rollout test of the compat tier.
import fc from "fast-check";
import { expect } from "vitest";
import type { RedisCapStore } from "../../functions/adapters/redis-cluster.ts";
import type { Policy } from "../../functions/core/capping/policy.ts";
import { capTagOf, recordRangeOf } from "../../sdk/src/protocol/index.ts";
import { type CapSendsCall, idOf, REDELIVERY_MS, runScript, type Step } from "./cap-sends-runner.ts";
import { CappingModel, fullestWindow } from "./capping-model.ts";
import { uniqueNamespace } from "./cluster.ts";
import { POLICY_CHANNELS } from "./policy-arbitrary.ts";
import { T0 } from "./rules.ts";

const CHANNELS = POLICY_CHANNELS;

// Tag 0, range 0: byte 1 below 32, byte 2 a multiple of 4, byte 3 below 4 (capTagOf, recordRangeOf). Bytes
// from a small alphabet, so an ID's 4 bytes often occur misaligned in the sorted ID section of its blob.
export const CRAMPED = (() => {
  const ids = new Set<number>();
  for (const b0 of [0, 1, 2, 3, 4, 8])
    for (const b1 of [0, 4, 8])
      for (const b2 of [0, 1, 2, 3]) for (const b3 of [0, 1, 2, 3, 4, 8]) ids.add(idOf(b0, b1, b2, b3));
  return [...ids];
})();
// Pattern specials and NUL in every byte position (each ID in some tag and range; several share a blob)
const SPECIALS = [0x25, 0x2e, 0x5b, 0x5e, 0x24, 0x00, 0x28, 0x2a];
export const SPECIAL_IDS = (() => {
  const ids = new Set<number>();
  for (const a of SPECIALS)
    for (const b of [0x25, 0x5b, 0x00]) {
      if (a >= 0x80) continue;
      ids.add(idOf(a, 0x24, b & 0xfc, 0x25));
      ids.add(idOf(a, 0x24, b & 0xfc, 0x2e));
      ids.add(idOf(a & 0x7f, 0x5c, 0x2b, b));
    }
  return [...ids];
})();
// A page of tag 0 range 0 dense enough for the block path, next to the cramped IDs
export const DENSE = Array.from({ length: 24 }, (_, i) => idOf(0, 0, 0, 0x10 + i));
export const EDGES = [0, 1, 2 ** 31 - 1, 2 ** 31 - 2, 2 ** 31 - 256, 255, 256, 1023, 1024];

for (const id of CRAMPED) {
  if (capTagOf(id) !== 0 || recordRangeOf(id) !== 0) throw new Error(`${id} is not of tag 0, range 0`);
}

export const ALL = [...new Set([...CRAMPED, ...SPECIAL_IDS, ...EDGES])];
export interface StepInput {
  kind: "campaign" | "check" | "dense";
  users: number[];
  dense: number[];
  check: number;
  mode: "count" | "peek";
  elapsed: number;
  skew: number;
  channel: string;
  campaignId: string;
  exemptCounted: boolean;
  byPrevious: boolean;
}
export const stepArbitrary: fc.Arbitrary<StepInput> = fc.record({
  kind: fc.constantFrom("campaign", "campaign", "campaign", "check", "dense"),
  users: fc.oneof(
    fc.subarray(CRAMPED, { minLength: 1, maxLength: 40 }),
    fc.subarray(ALL, { minLength: 1, maxLength: 60 }),
    fc.subarray([...SPECIAL_IDS, ...EDGES], { minLength: 1 }),
    fc.array(fc.constantFrom(...CRAMPED, ...EDGES), { minLength: 1, maxLength: 12 }),
  ),
  dense: fc.subarray(DENSE, { minLength: 16 }),
  check: fc.constantFrom(...ALL),
  mode: fc.constantFrom("count", "count", "count", "peek"),
  elapsed: fc.oneof(
    { weight: 8, arbitrary: fc.integer({ min: 0, max: 4_000 }) },
    { weight: 1, arbitrary: fc.integer({ min: 60_000, max: 700_000 }) },
  ),
  skew: fc.double({ min: -1, max: 1, noNaN: true }),
  channel: fc.constantFrom(...CHANNELS),
  campaignId: fc.constantFrom("", "c1", "c2", "c3", "c4", "c5", "c6", "c7"),
  exemptCounted: fc.constantFrom(false, false, false, false, true),
  byPrevious: fc.boolean(),
});

/**
 * Runs `steps` through the scripts (the current store, and with `mixed` the previous release's script for the
 * steps that say so) and checks every answer against the model, then every window against its cap.
 */
export async function runSteps(
  scripts: { store: RedisCapStore; previous: CapSendsCall },
  policy: Policy,
  splitBytes: number,
  steps: StepInput[],
  mixed = false,
) {
  const namespace = uniqueNamespace();
  const segmentOf = (user: number) => user % policy.segments.length;
  const model = new CappingModel(policy, segmentOf, REDELIVERY_MS);
  let now = T0;
  for (const step of steps) {
    now += step.elapsed;
    const reach = step.skew < 0 ? policy.backfillMs : Math.min(300_000, 3 * policy.backfillMs);
    const users =
      step.kind === "check"
        ? [step.check]
        : step.kind === "dense"
          ? [...new Set([...step.dense, ...step.users])]
          : [...new Set(step.users)];
    const call: Step = {
      mode: step.mode,
      now,
      at: now + Math.round(step.skew * reach),
      channel: step.channel,
      campaignId: step.kind === "check" ? "" : step.campaignId,
      exemptCounted: step.kind === "check" ? false : step.exemptCounted,
      users,
      withWindows: step.kind === "check",
      byPrevious: mixed && step.byPrevious,
    };
    // the script is handed the users unsorted, and with repeats (planCapSends dedupes them)
    const handed: Step = { ...call, users: [...step.users.filter((u) => users.includes(u)), ...users].reverse() };
    const got = await runScript(scripts, namespace, policy, segmentOf, handed, splitBytes);
    const byUser = new Map(handed.users.map((u, i) => [u, got[i]]));
    expect(
      users.map((u) => byUser.get(u)),
      JSON.stringify({ step: call }),
    ).toEqual(model.apply(call));
  }
  // exempt sends are counted without checks: only a run without them bounds every window by its cap
  if (steps.some((step) => step.exemptCounted && step.kind !== "check")) return;
  for (const user of model.users()) {
    const sends = model.sendsOf(user);
    for (const channel of CHANNELS) {
      for (const cap of policy.capsFor(segmentOf(user), channel)) {
        const counted = sends.filter((s) => cap.channel === "*" || s.channel === cap.channel).map((s) => s.at);
        expect(fullestWindow(counted, cap.windowMs)).toBeLessThanOrEqual(cap.max);
      }
    }
  }
}
