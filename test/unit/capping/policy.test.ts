import { describe, expect, it } from "vitest";
import {
  idempotencyMs,
  keptHorizonMs,
  keptMs,
  parsePolicy,
  parsePolicyText,
} from "../../../functions/core/capping/policy.ts";
import { InvalidPolicyError } from "../../../functions/core/shared/errors.ts";
import { designPolicy } from "../../support/rules.ts";

/** docs/api.md's policy plus a second segment. */
const valid = () => {
  const policy = designPolicy();
  policy.segments.push({
    name: "active",
    bitmap: "segments/active.roaring",
    caps: { push: [{ window: "12h", max: 1 }] },
  });
  return policy;
};

function issuesOf(document: unknown): readonly string[] {
  try {
    parsePolicy(document);
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidPolicyError);
    return (error as InvalidPolicyError).issues;
  }
  throw new Error("expected the policy to be rejected");
}

describe("policy", () => {
  it("takes onStoreLoss pause (the default) or continue, and names the field of any other value", () => {
    expect(parsePolicy(valid()).onStoreLoss).toBe("pause");
    expect(parsePolicy({ ...valid(), onStoreLoss: "continue" }).onStoreLoss).toBe("continue");
    expect(issuesOf({ ...valid(), onStoreLoss: "stop" })).toEqual(['onStoreLoss: expected "pause" or "continue"']);
    expect(issuesOf({ ...valid(), onStoreLoss: null })).toEqual(['onStoreLoss: expected "pause" or "continue"']);
  });

  it("compiles the DESIGN example: a channel's own caps, then the '*' caps", () => {
    const policy = parsePolicy(valid());
    expect(policy.segments.map((s) => s.name)).toEqual(["new", "active", "unsegmented"]);
    expect(policy.defaultSegment).toBe(2);
    expect(policy.capsFor(0, "push").map((c) => `${c.channel}:${c.window}:${c.max}`)).toEqual([
      "push:1d:2",
      "push:7d:5",
      "*:7d:6",
    ]);
    // a channel without its own entry has only the "*" caps
    expect(policy.capsFor(0, "inapp").map((c) => `${c.channel}:${c.window}`)).toEqual(["inapp:day", "*:7d"]);
    expect(policy.capsFor(1, "email")).toEqual([]);
    expect(policy.capsFor(2, "push")).toEqual([{ channel: "*", window: "7d", windowMs: 7 * 86_400_000, max: 2 }]);
    expect(policy.backfillMs).toBe(7 * 86_400_000);
  });

  it("keeps a segment's sends for the deepest backfill, its own longest window and the skew bound, and named ones for the redelivery bound", () => {
    const document = valid();
    document.segments = [];
    document.default.caps = { "*": [{ window: "1m", max: 2 }] };
    const short = parsePolicy(document);
    expect(short.retentionMs(0)).toBe(2 * 60_000 + 5 * 60_000); // what the windows need
    // idempotency: the backfill, then the redelivery bound from the send's counting, then the skew bound
    expect(idempotencyMs(short, 30 * 60_000)).toBe(60_000 + 30 * 60_000 + 5 * 60_000);
    expect(keptMs(short, 0, 30 * 60_000)).toBe(36 * 60_000);
    expect(keptHorizonMs(short, 30 * 60_000)).toBe(36 * 60_000);
    expect(keptMs(short, 0, 0)).toBe(7 * 60_000); // a bound shorter than the windows adds nothing
    document.default.caps = { "*": [{ window: "20h", max: 2 }] };
    const policy = parsePolicy(document);
    expect(policy.backfillMs).toBe(20 * 3_600_000);
    expect(policy.retentionMs(policy.defaultSegment)).toBe(40 * 3_600_000 + 5 * 60_000);
    expect(policy.horizonMs).toBe(40 * 3_600_000 + 5 * 60_000);
    // a policy without caps still bounds backfills, at 30 days
    document.default.caps = {};
    expect(parsePolicy(document).backfillMs).toBe(30 * 86_400_000);
  });

  it("names the field of a malformed window", () => {
    const document = valid();
    (document.segments[1]!.caps.push![0] as { window: string }).window = "1 week";
    expect(issuesOf(document)).toEqual([
      'segments[1].caps.push[0].window: expected e.g. "7d", or a calendar window ("day", "week", "month")',
    ]);
  });

  it("accepts windows from 1s to 30d and refuses the rest", () => {
    for (const window of ["1s", "90m", "48h", "30d"]) {
      const document = valid();
      document.default.caps = { "*": [{ window, max: 1 }] };
      expect(() => parsePolicy(document)).not.toThrow();
    }
    for (const window of ["0s", "31d", "721h", "7w", "-1d", "1.5d"]) {
      const document = valid();
      document.default.caps = { "*": [{ window, max: 1 }] };
      expect(issuesOf(document).join()).toMatch(/^default\.caps\.\*\[0\]\.window: expected/);
    }
  });

  it("refuses a max that is not an integer from 0", () => {
    for (const max of [-1, 1.5, "3", 10_001]) {
      const document = valid();
      (document.default.caps["*"]![0] as { max: unknown }).max = max;
      expect(issuesOf(document).join()).toMatch(/^default\.caps\.\*\[0\]\.max: /);
    }
    const zero = valid();
    zero.default.caps["*"]![0]!.max = 0;
    expect(() => parsePolicy(zero)).not.toThrow();
  });

  it("refuses caps for a channel the policy does not list", () => {
    const document = valid();
    (document.segments[0]!.caps as Record<string, unknown>).fax = [{ window: "1d", max: 1 }];
    expect(issuesOf(document)).toEqual(['segments[0].caps.fax: unknown channel "fax" (not in channels)']);
  });

  it("refuses duplicate channels, segment names and bitmaps", () => {
    const document = valid();
    document.channels.push("push");
    document.segments[1]!.name = "new";
    document.segments[1]!.bitmap = "segments/new.roaring";
    document.default.name = "new";
    expect(issuesOf(document)).toEqual([
      'channels[4]: duplicate channel "push"',
      'segments[1].name: duplicate segment "new"',
      'segments[1].bitmap: bitmap "segments/new.roaring" is used by another segment',
      'default.name: "new" is also a segment name',
    ]);
  });

  it("names each missing or misspelled field", () => {
    for (const field of ["version", "channels", "segments", "default"] as const) {
      const document: Record<string, unknown> = valid();
      delete document[field];
      expect(issuesOf(document).join()).toMatch(new RegExp(`^${field}: `));
    }
    const typo: Record<string, unknown> = { ...valid(), segment: [] };
    expect(issuesOf(typo).join()).toMatch(/segment/);
    const document = valid();
    (document.segments[0] as Record<string, unknown>).bitmap = "/etc/passwd";
    expect(issuesOf(document)).toEqual(["segments[0].bitmap: expected a relative object key"]);
  });

  it("refuses a bitmap under accepted/, where containers keep their copies of accepted bitmaps", () => {
    const document = valid();
    (document.segments[1] as Record<string, unknown>).bitmap = "accepted/segments/new.roaring";
    expect(issuesOf(document)).toEqual([
      "segments[1].bitmap: expected a key outside accepted/ (where containers keep copies)",
    ]);
  });

  it("reports a file that is not JSON", () => {
    expect(() => parsePolicyText("{ version: 1 ")).toThrow(/invalid policy: not valid JSON/);
  });
});
