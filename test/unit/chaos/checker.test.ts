// The chaos checker on hand-made histories: each rule of the contract passes at its bound and fails one past it.
import { describe, expect, it } from "vitest";
import { denialsUnderLimit, recoveryMs, utilisation, worstWindow } from "../../../scripts/chaos/checker.ts";
import type { ContractPhase, Decision, History } from "../../../scripts/chaos/contract.ts";
import { check } from "../../../scripts/chaos/verdicts.ts";

const strict10: ContractPhase[] = [{ from: 0, mode: "strict", limits: [{ windowMs: 1000, max: 10 }] }];

const admit = (at: number, instance = 0, cost = 1): Decision => ({ at, instance, allowed: true, cost });
const deny = (at: number, instance = 0, cost = 1): Decision => ({ at, instance, allowed: false, cost });
/** `count` admissions from `from`, `gap` ms apart. */
const admits = (count: number, from: number, gap: number, instance = 0) =>
  Array.from({ length: count }, (_, i) => admit(from + i * gap, instance));

function history(decisions: Decision[], extra: Partial<History> = {}): History {
  return {
    decisions,
    readyAt: new Map([
      [0, 0],
      [1, 0],
    ]),
    offeredPerSecond: 0,
    storeDelayMs: 0,
    startAt: 0,
    endAt: Math.max(0, ...decisions.map((d) => d.at)) + 1,
    ...extra,
  };
}

describe("chaos checker: strict's sliding window", () => {
  it("passes L admissions in one window and fails L + 1 (one over by one)", () => {
    expect(check(history(admits(10, 0, 50)), strict10).pass).toBe(true);
    const over = check(history(admits(11, 0, 50)), strict10);
    expect(over.pass).toBe(false);
    expect(over.figures.worst).toMatchObject({ admitted: 11, bound: 10, windowMs: 1000 });
  });

  it("counts a window as [s, s + W): admissions exactly W apart are in different windows", () => {
    const atOnce = admits(10, 0, 0);
    expect(worstWindow(history([...atOnce, admit(1000)]), strict10)?.admitted).toBe(10);
    expect(worstWindow(history([...atOnce, admit(999.9)]), strict10)?.admitted).toBe(11);
  });

  it("finds a window that starts anywhere, not on a fixed grid", () => {
    // 5 at the end of one second and 6 at the start of the next: no aligned second holds more than 6
    const straddling = [...admits(5, 900, 10), ...admits(6, 1000, 10)];
    expect(check(history(straddling), strict10).pass).toBe(false);
  });

  it("counts costs, admissions by every instance and ignores denials", () => {
    const mixed = [admit(0, 0, 4), admit(10, 1, 4), deny(20, 0, 50), admit(30, 1, 2)];
    expect(worstWindow(history(mixed), strict10)?.admitted).toBe(10);
    expect(check(history([...mixed, admit(40, 0, 1)]), strict10).pass).toBe(false);
  });

  it("holds every limit of the rule: the 5 s limit fails though every 1 s window is within its own", () => {
    const twoLimits: ContractPhase[] = [
      {
        from: 0,
        mode: "strict",
        limits: [
          { windowMs: 1000, max: 10 },
          { windowMs: 5000, max: 30 },
        ],
      },
    ];
    const steady = Array.from({ length: 5 }, (_, s) => admits(7, s * 1000, 100)).flat();
    expect(check(history(steady), twoLimits).pass).toBe(false);
    expect(check(history(steady.slice(0, 30)), twoLimits).pass).toBe(true);
  });
});

describe("chaos checker: approximate's published bound", () => {
  const approximate100: ContractPhase[] = [{ from: 0, mode: "approximate", limits: [{ windowMs: 1000, max: 100 }] }];

  it("allows L + R · (100 ms + 2d) and fails one more", () => {
    // R = 200/s, d = 5 ms: 100 + 0.2 · 110 = 122
    const fleet = { offeredPerSecond: 200, storeDelayMs: 5 };
    expect(check(history(admits(122, 0, 5), fleet), approximate100).pass).toBe(true);
    const over = check(history(admits(123, 0, 5), fleet), approximate100);
    expect(over.pass).toBe(false);
    expect(over.figures.worst?.bound).toBeCloseTo(122);
  });
});

describe("chaos checker: a rule changed or removed mid-run", () => {
  const lowered: ContractPhase[] = [
    { from: 0, mode: "strict", limits: [{ windowMs: 1000, max: 10 }] },
    { from: 2000, mode: "strict", limits: [{ windowMs: 1000, max: 5 }] },
  ];

  it("allows the old limit for 1 s after the change (the change reaching every client), then the new one", () => {
    expect(check(history(admits(10, 2500, 10)), lowered).pass).toBe(true);
    expect(check(history(admits(5, 3500, 10)), lowered).pass).toBe(true);
    expect(check(history(admits(6, 3500, 10)), lowered).pass).toBe(false);
  });

  it("fails any admission a second after the rule was removed", () => {
    const removed: ContractPhase[] = [
      strict10[0] as ContractPhase,
      { ...(strict10[0] as ContractPhase), from: 2000, removed: true },
    ];
    expect(check(history([admit(2900)]), removed).pass).toBe(true);
    const late = check(history([admit(3100)]), removed);
    expect(late.pass).toBe(false);
    expect(late.figures.worst).toMatchObject({ admitted: 1, bound: 0 });
  });
});

describe("chaos checker: no denial under the limit after ready()", () => {
  it("counts a denial while the past window had room, not one at the limit", () => {
    const under = [...admits(5, 0, 10), deny(100)];
    expect(denialsUnderLimit(history(under), strict10)).toEqual({ denied: 1, underLimit: 1, judged: 6 });
    const atLimit = [...admits(10, 0, 10), deny(200)];
    expect(denialsUnderLimit(history(atLimit), strict10).underLimit).toBe(0);
  });

  it("takes the past window as (t − W, t]: an admission exactly W before has left it", () => {
    const leaving = [...admits(10, 0, 10), deny(1000)];
    // the one at 0 is out of (0, 1000], so 9 are in it: room for one more
    expect(denialsUnderLimit(history(leaving), strict10).underLimit).toBe(1);
  });

  it("does not judge an instance before its ready() resolved, nor inside a fault span", () => {
    const early = history([deny(50, 1)], { readyAt: new Map([[1, 100]]) });
    expect(denialsUnderLimit(early, strict10)).toEqual({ denied: 1, underLimit: 0, judged: 0 });
    expect(denialsUnderLimit(history([deny(500)]), strict10, [[400, 600]]).underLimit).toBe(0);
  });

  it("judges a request by when it was made: asked before ready() and decided after it, it is not judged", () => {
    const waited = history([{ ...deny(150, 1), askedAt: 90 }], { readyAt: new Map([[1, 100]]) });
    expect(denialsUnderLimit(waited, strict10)).toEqual({ denied: 1, underLimit: 0, judged: 0 });
    const askedAfter = history([{ ...deny(150, 1), askedAt: 110 }], { readyAt: new Map([[1, 100]]) });
    expect(denialsUnderLimit(askedAfter, strict10)).toEqual({ denied: 1, underLimit: 1, judged: 1 });
  });

  it("fails the verdict past the allowed share and passes within it", () => {
    const decisions = [...admits(98, 0, 10), deny(985), deny(990)];
    expect(check(history(decisions), strict10, { underLimitShare: 0.01 }).pass).toBe(false);
    expect(check(history(decisions), strict10, { underLimitShare: 0.05 }).verdicts[1]?.pass).toBe(true);
  });
});

describe("chaos checker: utilisation and recovery", () => {
  it("takes utilisation as admitted ÷ min(offered, L per window)", () => {
    // 2× offered over 2 s, L admitted each second
    const run = [
      ...admits(10, 0, 100),
      ...admits(10, 1000, 100),
      ...Array.from({ length: 20 }, (_, i) => deny(i * 100 + 50)),
    ];
    expect(utilisation(history(run), strict10, 0, 2000)).toBe(1);
    expect(utilisation(history(run.slice(5)), strict10, 0, 2000)).toBe(0.75);
  });

  it("measures recovery from the fault's end to the first window at 95 % of what it could admit", () => {
    // offered 20/s throughout; nothing admitted until 3000, then 10 a second
    const offered = Array.from({ length: 100 }, (_, i) => i * 50);
    const decisions = offered.map((at) => (at >= 3000 && at % 100 === 0 ? admit(at) : deny(at)));
    // [2910, 3910) is the first window holding 10 (3000 to 3900): service was back 1 s after the fault
    expect(recoveryMs(history(decisions, { endAt: 5000 }), strict10, 2000)).toBe(910);
    expect(
      recoveryMs(
        history(
          decisions.map((d) => ({ ...d, allowed: false })),
          { endAt: 5000 },
        ),
        strict10,
        2000,
      ),
    ).toBe(undefined);
  });
});
