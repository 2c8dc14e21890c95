// Random capping policies for the property tests of cap-sends: channels "a" and "b", up to two segments
// and a default, each with up to two caps per channel and two across channels ("*"), short windows.
import fc from "fast-check";
import { parsePolicy } from "../../functions/core/capping/policy.ts";

export const POLICY_CHANNELS = ["a", "b"];

const capArbitrary = fc.record({
  window: fc.constantFrom("1s", "2s", "5s", "30s", "1m"),
  max: fc.integer({ min: 0, max: 3 }),
});
const capsArbitrary = fc.record(
  {
    a: fc.array(capArbitrary, { maxLength: 2 }),
    b: fc.array(capArbitrary, { maxLength: 1 }),
    "*": fc.array(capArbitrary, { maxLength: 2 }),
  },
  { requiredKeys: [] },
);
export const policyArbitrary = fc
  .record({ segments: fc.array(capsArbitrary, { maxLength: 2 }), defaultCaps: capsArbitrary })
  .map(({ segments, defaultCaps }) =>
    parsePolicy({
      version: "prop",
      channels: POLICY_CHANNELS,
      segments: segments.map((caps, i) => ({ name: `s${i}`, bitmap: `segments/s${i}.roaring`, caps })),
      default: { name: "rest", caps: defaultCaps },
    }),
  );
