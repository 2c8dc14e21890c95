// No test or doc example depends on the date it runs on: an absolute time is fine only where a pinned clock
// goes with it. (The docs examples once aged out: an `at` dated 2026-11-22 was refused from 2026-11-29 on.)
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { parsePolicy } from "../../../functions/core/capping/policy.ts";
import { MAX_FUTURE_MS } from "../../../functions/core/shared/clock.ts";
import {
  calendarLiterals,
  EXAMPLES_NOW,
  EXECUTED_DOCS,
  epochLiterals,
  examplesOf,
  readDoc,
} from "../../support/docs-examples.ts";
import { designPolicy } from "../../support/rules.ts";

const root = fileURLToPath(new URL("../../..", import.meta.url));
/** The longest a reply's time may lie from the pinned clock: the longest window a policy may have (30 d). */
const LONGEST_WINDOW_MS = 30 * 86_400_000;
/** The pinned moment itself is written once, where it is defined. */
const PIN = "test/support/docs-examples.ts";

function filesUnder(dir: string, suffix: string): string[] {
  return readdirSync(join(root, dir)).flatMap((name) => {
    const path = join(dir, name);
    if (name === "node_modules") return [];
    if (statSync(join(root, path)).isDirectory()) return filesUnder(path, suffix);
    return path.endsWith(suffix) ? [path] : [];
  });
}

/** A file that builds a pinned clock (the core's `fixedClock`, the SDK tests' `manualClock`) hands its times to it. */
const PINNED_CLOCK = /\b(fixedClock|manualClock)\(/;

/**
 * The files that carry an absolute time not tied to a pinned clock: neither the file builds one, nor a comment
 * says which clock the time pins (`// pinned: the time the pure function is given`), on its line or at the
 * head of its paragraph (the lines since the last blank one).
 */
function undatedFixtures(files: Record<string, string>): string[] {
  return Object.entries(files)
    .filter(([, text]) => !PINNED_CLOCK.test(text))
    .filter(([, text]) => {
      let said = false;
      return text.split("\n").some((line) => {
        if (line.trim() === "") said = false;
        if (/\/\/.*\bpinned\b/.test(line)) said = true;
        return !said && (epochLiterals(line).length > 0 || calendarLiterals(line).length > 0);
      });
    })
    .map(([path]) => path);
}

/** The `at` of an example request that the API, with its clock at `now`, would refuse. */
function refusedAts(markdown: string, now: number, backfillMs: number): number[] {
  return examplesOf(markdown)
    .flatMap((example) => {
      if (!example.body) return [];
      const body = JSON.parse(example.body) as { at?: unknown };
      return typeof body.at === "number" ? [body.at] : [];
    })
    .filter((at) => at > now + MAX_FUTURE_MS || at < now - backfillMs);
}

describe("dated docs examples", () => {
  const backfillMs = parsePolicy(designPolicy()).backfillMs;

  it("dates every example request of an executed doc within what the API accepts at the pinned clock", () => {
    for (const doc of EXECUTED_DOCS) expect(refusedAts(readDoc(doc), EXAMPLES_NOW, backfillMs), doc).toEqual([]);
  });

  it("would see an example aged out: the same page is refused a week and a day later", () => {
    const later = EXAMPLES_NOW + backfillMs + 86_400_000;
    expect(refusedAts(readDoc("docs/api.md"), later, backfillMs).length).toBeGreaterThan(0);
  });

  it("keeps every absolute time of the docs near the pinned clock, and only in docs a test runs", () => {
    const docs = ["README.md", ...filesUnder("docs", ".md")];
    for (const path of docs) {
      const times = epochLiterals(readFileSync(join(root, path), "utf8"));
      if (times.length === 0) continue;
      expect(
        EXECUTED_DOCS as readonly string[],
        `${path} carries absolute times but no test pins a clock to it`,
      ).toContain(path);
      const far = times.filter((time) => Math.abs(time - EXAMPLES_NOW) > LONGEST_WINDOW_MS);
      expect(far, path).toEqual([]);
    }
  });
});

describe("dated test fixtures", () => {
  it("finds times in ms since the epoch and calendar dates written in code", () => {
    expect(epochLiterals('{ "at": 1795323600000, "n": 123, "big": 99999999999999 }')).toEqual([1795323600000]);
    expect(calendarLiterals('Date.UTC(2026, 10, 22); new Date("2026-11-22T05:00:00Z"); Date.now()')).toHaveLength(2);
  });

  it("flags a fixture with an absolute time and no pinned clock, and passes one with it", () => {
    const dated = "const at = Date.UTC(2026, 10, 22);";
    expect(
      undatedFixtures({
        "bare.test.ts": dated,
        "clock.test.ts": `${dated}\nconst clock = fixedClock(at);`,
        "sdk.test.ts": `${dated}\nconst time = manualClock(at);`,
        "said.test.ts": `// pinned: the \`now\` every call below is given\n${dated}`,
        "said-far.test.ts": `// pinned: the \`now\` every call below is given\n\n${dated}`,
      }),
    ).toEqual(["bare.test.ts", "said-far.test.ts"]);
  });

  it("has no test or test support file with an absolute time not tied to a pinned clock", () => {
    const files = ["test", "sdk/test"].flatMap((dir) => filesUnder(dir, ".ts")).filter((path) => path !== PIN);
    const texts = Object.fromEntries(
      files.map((path) => [relative(root, join(root, path)), readFileSync(join(root, path), "utf8")]),
    );
    expect(Object.keys(texts).length).toBeGreaterThan(50);
    expect(undatedFixtures(texts)).toEqual([]);
  });
});
