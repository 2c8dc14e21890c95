// The local decision engine on its own: no store, no timers; time is passed in by hand and replies are
// built here as the store would send them.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type EngineOptions, QuotaEngine } from "../../src/engine.ts";
import {
  MAX_KEYS_PER_SYNC,
  MAX_SYNC_BODY_BYTES,
  type QuotaRule,
  type SyncReply,
  type SyncRequest,
  WireError,
} from "../../src/protocol/index.ts";

const F = 50;
const api: QuotaRule = {
  mode: "approximate",
  limits: [
    { windowMs: 1_000, max: 100 },
    { windowMs: 5_000, max: 300 },
  ],
  leaseMs: 200,
  fallback: "share",
  slotGroups: 1,
};
const pay: QuotaRule = {
  mode: "strict",
  limits: [{ windowMs: 1_000, max: 50 }],
  leaseMs: 200,
  fallback: "deny",
  slotGroups: 1,
};

function engine(options: Partial<EngineOptions> = {}) {
  return new QuotaEngine({ instanceId: "i-1", rules: { api, pay }, syncIntervalMs: F, ...options });
}

const group = (e: QuotaEngine, rule = "api") => e.rule(rule)!.groups[0]!;

/** A reply to `request` as the store would send it at `serverTime`: one assignment per entry. */
function reply(
  request: SyncRequest,
  serverTime: number,
  amount: (key: string) => number,
  extra: Partial<SyncReply> & { mode?: "strict" | "approximate"; validForMs?: number; used?: number[] } = {},
): SyncReply {
  const mode = extra.mode ?? "approximate";
  return {
    status: extra.status ?? "applied",
    serverTime,
    configVersion: extra.configVersion ?? "v1",
    instances: extra.instances ?? 4,
    ...(extra.rule ? { rule: extra.rule } : {}),
    entries: request.entries.map((entry) => {
      const base = { key: entry.key, denyUntil: 0, resetAt: serverTime + 800, used: extra.used ?? [10, 20] };
      const validUntil = serverTime + (extra.validForMs ?? 2 * F);
      return mode === "strict"
        ? { ...base, mode, tokens: amount(entry.key), leaseExpiresAt: validUntil }
        : { ...base, mode, allowance: amount(entry.key), validUntil };
    }),
  };
}

/** One round trip for the rule's only group: request taken at `now`, reply applied at once. */
function sync(
  e: QuotaEngine,
  now: number,
  amount: (key: string) => number,
  extra: Parameters<typeof reply>[3] = {},
  rule = "api",
) {
  const g = group(e, rule);
  const request = e.takeRequest(g, now);
  if (!request) return undefined;
  e.applyReply(g, reply(request, now + 1_000_000, amount, extra), now, now);
  return request;
}

describe("check", () => {
  it("admits from the allowance until it runs out, then denies with Retry-After of at least 1 s", () => {
    const e = engine();
    const h = e.resolve("api", "k");
    sync(e, 0, () => 3);
    const seen = [1, 2, 3, 4].map(() => ({ ...e.checkHandle(h) }));
    expect(seen.map((d) => d.allowed)).toEqual([true, true, true, false]);
    expect(seen[2]).toMatchObject({ limit: 100, remaining: 0, retryAfterSeconds: 0, policy: "100;w=1, 300;w=5" });
    expect(seen[3]).toMatchObject({ allowed: false, limit: 100, remaining: 0, resetSeconds: 1, retryAfterSeconds: 1 });
  });

  it("several limits all-or-nothing: the headers name the window with the least left", () => {
    const e = engine();
    e.resolve("api", "k");
    sync(e, 0, () => 10, { used: [10, 290] });
    expect(e.check("api", "k")).toMatchObject({ allowed: true, limit: 300, remaining: 9 });
  });

  it("a cost of 0 peeks; a cost larger than what is left is denied and spends nothing", () => {
    const e = engine();
    const h = e.resolve("api", "k");
    sync(e, 0, () => 2);
    expect(e.checkHandle(h, 0).allowed).toBe(true);
    expect(e.checkHandle(h, 3).allowed).toBe(false);
    expect(e.checkHandle(h, 2).allowed).toBe(true);
    expect(h.used).toBe(2);
    expect(h.denied).toBe(3);
  });

  it("string keys and resolved handles share one state", () => {
    const e = engine();
    const h = e.resolve("api", "tenant-1");
    sync(e, 0, () => 2);
    e.check("api", "tenant-1");
    expect(e.checkHandle(h).allowed).toBe(true);
    expect(e.check("api", "tenant-1").allowed).toBe(false);
    expect(e.size).toBe(1);
  });
});

describe("keys without an allowance", () => {
  it("share: the tightest limit over the store's instance count, never the whole limit", () => {
    const e = engine();
    e.resolve("api", "known");
    sync(e, 0, () => 1, { instances: 4 });
    // min(100 / 4, 300 / 4)
    expect(e.resolve("api", "new").left).toBe(25);
  });

  it("share with the instance count unknown: nothing until the first sync, not the whole limit", () => {
    expect(engine().check("api", "new").allowed).toBe(false);
    expect(engine({ instancesHint: 2 }).resolve("api", "new").left).toBe(50);
  });

  it("deny (the strict rule here): denied until tokens are granted", () => {
    expect(engine({ instancesHint: 1 }).check("pay", "k").allowed).toBe(false);
  });

  it("a rule nobody defined follows unknownRule, and the first reply brings its definition", () => {
    expect(engine({ unknownRule: "allow" }).check("nope", "k").allowed).toBe(true);
    const e = engine();
    const h = e.resolve("late", "k");
    expect(e.checkHandle(h).allowed).toBe(false);
    const request = sync(e, 0, () => 7, { rule: { ...api, limits: [{ windowMs: 2_000, max: 10 }] } }, "late");
    expect(request).toMatchObject({ rule: "late", seq: 1, configVersion: "", entries: [{ key: "k", offered: 1 }] });
    expect(e.checkHandle(h)).toMatchObject({ allowed: true, limit: 10, remaining: 6, policy: "10;w=2" });
    expect(e.rule("late")!.configVersion).toBe("v1");
  });

  it("a rule the store does not have: fallback, and no sync for it for half a second", () => {
    const e = engine({ instancesHint: 1 });
    e.check("api", "k");
    sync(e, 0, () => 0, { status: "norule" });
    e.check("api", "k");
    expect(e.takeRequest(group(e), 499)).toBeUndefined();
    expect(e.takeRequest(group(e), 500)).toBeDefined();
  });
});

describe("sync side", () => {
  it("reports usage with its epoch and demand, once; the new allowance is reduced by what was admitted since sending", () => {
    const e = engine({ instancesHint: 1 });
    const h = e.resolve("api", "k");
    for (let i = 0; i < 5; i++) e.checkHandle(h);
    e.checkHandle(h, 100);
    const g = group(e);
    const request = e.takeRequest(g, 40)!;
    expect(request.entries).toEqual([{ key: "k", usage: [[40, 5]], refunds: [], offered: 105, want: 0 }]);
    // two admitted while the sync was on the wire
    e.checkHandle(h);
    e.checkHandle(h);
    e.applyReply(
      g,
      reply(request, 7_000, () => 10),
      40,
      45,
    );
    expect(h.left).toBe(8);
    expect(e.takeRequest(g, 90)).toMatchObject({ seq: 2, entries: [{ usage: [[90, 2]], offered: 2 }] });
  });

  it("an unanswered request goes out again as is (same seq, same entries); new usage waits for the next", () => {
    const e = engine({ instancesHint: 1 });
    e.check("api", "k");
    const g = group(e);
    const first = e.takeRequest(g, 0)!;
    e.unreachable(g, 0);
    e.check("api", "k");
    expect(e.takeRequest(g, 50)).toBe(first);
    e.applyReply(
      g,
      reply(first, 50, () => 10),
      50,
      60,
    );
    expect(e.takeRequest(g, 100)).toMatchObject({ seq: 2, entries: [{ usage: [[100, 1]] }] });
  });

  it("a request the store answered with an error goes out again under a new seq, usage kept", () => {
    const e = engine({ instancesHint: 1 });
    e.check("api", "k");
    const g = group(e);
    e.takeRequest(g, 0);
    e.rejected(g);
    expect(e.takeRequest(g, 50)).toMatchObject({ seq: 2, entries: [{ usage: [[0, 1]] }] });
  });

  it("approximate allowances lapse at their validity (converted from the send time) and fall back", () => {
    const e = engine();
    const h = e.resolve("api", "k");
    sync(e, 0, () => 40, { instances: 4, validForMs: 100 });
    e.advance(99);
    expect(h.left).toBe(40);
    e.advance(100);
    expect(h.left).toBe(25);
  });

  it("approximate: a lapsed allowance is never replaced by a fresh share (the store still holds it reserved)", () => {
    const e = engine();
    const h = e.resolve("api", "k");
    sync(e, 0, () => 10, { instances: 4, validForMs: 100 });
    for (let i = 0; i < 6; i++) e.checkHandle(h);
    e.advance(100);
    // 4 of the 10 were left; the share (25) would have been a new budget on every late reply
    expect(h.left).toBe(4);
    expect(e.checkHandle(h).allowed).toBe(true);
  });

  it("strict: tokens are added per grant, spent oldest first, never after their lease, and come back as refunds", () => {
    const e = engine();
    const h = e.resolve("pay", "k");
    e.checkHandle(h);
    const g = group(e, "pay");
    const first = e.takeRequest(g, 0)!;
    expect(first.entries[0]).toMatchObject({ offered: 1, want: 1, usage: [] });
    e.applyReply(
      g,
      reply(first, 10_000, () => 5, { mode: "strict", validForMs: 200 }),
      0,
      2,
    );
    expect(h.left).toBe(5);
    e.checkHandle(h, 3);
    const second = e.takeRequest(g, 50)!;
    e.applyReply(
      g,
      reply(second, 10_050, () => 4, { mode: "strict", validForMs: 200 }),
      50,
      52,
    );
    expect(h.left).toBe(6);
    // the first grant ends at 200: it is treated as ended one interval early, with 2 tokens unused
    e.advance(150);
    expect(h.left).toBe(4);
    expect(e.takeRequest(g, 150)?.entries[0]?.refunds).toEqual([[10_000, 2]]);
  });

  it("strict: asks for about 0.75 intervals of the key's recent rate, less what it holds (held tokens count from their grant; a key that runs dry asks again early)", () => {
    const e = engine();
    const h = e.resolve("pay", "k");
    const g = group(e, "pay");
    let want = 0;
    // 20 requests offered per 50 ms interval, none granted: the rate settles near 0.4 per ms
    for (let round = 0; round <= 8; round++) {
      for (let i = 0; i < 20; i++) e.checkHandle(h);
      const request = e.takeRequest(g, round * F)!;
      want = request.entries[0]!.want;
      e.applyReply(
        g,
        reply(request, 10_000 + round * F, () => 0, { mode: "strict" }),
        round * F,
        round * F,
      );
    }
    expect(want).toBeGreaterThanOrEqual(14); // three quarters of an interval's worth (15), less rounding
    expect(want).toBeLessThanOrEqual(16); // and a token, not 1.25 intervals (25)
  });

  it("strict: when its rounds come late, asks for 0.75 of the interval it last took, never past a lease and an interval", () => {
    const wantAfter = (gapMs: number) => {
      const e = engine();
      const h = e.resolve("pay", "k");
      const g = group(e, "pay");
      let want = 0;
      // the same rate as above (0.4 per ms), but the loop's rounds come every `gapMs`
      for (let round = 0; round <= 8; round++) {
        for (let i = 0; i < 0.4 * gapMs; i++) e.checkHandle(h);
        const request = e.takeRequest(g, round * gapMs)!;
        want = request.entries[0]!.want;
        e.applyReply(
          g,
          reply(request, 10_000 + round * gapMs, () => 0, { mode: "strict" }),
          round * gapMs,
          round * gapMs,
        );
      }
      return want;
    };
    // rounds 100 ms apart: 0.75 × 100 ms of the rate (30), not 0.75 × F (15): it would run dry early
    expect(wantAfter(100)).toBeGreaterThanOrEqual(27);
    expect(wantAfter(100)).toBeLessThanOrEqual(31);
    // rounds 1 s apart: at most the lease (200 ms) and an interval of the rate (100), not 0.75 s of it (300)
    expect(wantAfter(1_000)).toBeGreaterThanOrEqual(90);
    expect(wantAfter(1_000)).toBeLessThanOrEqual(101);
  });

  it("strict: spent tokens are reported per grant in the next request's usage, once; a refused request's are dropped (the store may have applied it: taken off twice they could over-admit)", () => {
    const e = engine();
    const h = e.resolve("pay", "k");
    e.checkHandle(h);
    const g = group(e, "pay");
    const first = e.takeRequest(g, 0)!;
    e.applyReply(
      g,
      reply(first, 10_000, () => 5, { mode: "strict", validForMs: 300 }),
      0,
      2,
    );
    e.checkHandle(h, 2);
    e.advance(50);
    const second = e.takeRequest(g, 50)!;
    e.applyReply(
      g,
      reply(second, 10_050, () => 4, { mode: "strict", validForMs: 300 }),
      50,
      52,
    );
    // 3 more: the first grant's last 3 tokens, oldest first
    e.checkHandle(h, 3);
    e.advance(100);
    e.checkHandle(h, 1); // not charged yet: spent after this tick, reported with the next
    const third = e.takeRequest(g, 100)!;
    expect(third.entries[0]?.usage).toEqual([[10_000, 3]]);
    e.rejected(g);
    e.advance(150);
    const again = e.takeRequest(g, 150)!;
    expect(again.seq).toBe(third.seq + 1);
    // the refused request's 3 are not sent again (the store counts their grant until its lease ends)
    expect(again.entries[0]?.usage).toEqual([[10_050, 1]]);
    e.applyReply(
      g,
      reply(again, 10_150, () => 0, { mode: "strict", validForMs: 300 }),
      150,
      152,
    );
    e.advance(200);
    expect(e.takeRequest(g, 200)?.entries[0]?.usage ?? []).toEqual([]);
  });

  it("an operator's change (a new definition in a reply) reaches resolved handles at once", () => {
    const e = engine({ instancesHint: 2 });
    const h = e.resolve("api", "k");
    sync(e, 0, () => 3, { rule: { ...api, limits: [{ windowMs: 1_000, max: 8 }] }, configVersion: "v2" });
    expect(e.checkHandle(h)).toMatchObject({ allowed: true, limit: 8, policy: "8;w=1" });
    expect(e.rule("api")!.configVersion).toBe("v2");
  });

  it("keys move to their slot group when a definition changes the number of groups", () => {
    const e = engine();
    for (let i = 0; i < 20; i++) e.resolve("api", `k${i}`);
    sync(e, 0, () => 1, { rule: { ...api, slotGroups: 4 } });
    const sizes = e.rule("api")!.groups.map((g) => g.handles.size);
    expect(sizes).toHaveLength(4);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(20);
  });

  it("a slot group dropped when slotGroups goes from 4 to 1 comes back at 4 with its sequence numbers (the store remembers them)", () => {
    const e = engine();
    const rule = e.rule("api")!;
    rule.define({ ...api, slotGroups: 4 }, "v2");
    const key = Array.from({ length: 50 }, (_, i) => `k${i}`).find((k) => rule.groupFor(k).index === 2)!;
    e.check("api", key);
    const g2 = rule.groupFor(key);
    for (let i = 0; i < 40; i++) {
      e.check("api", key);
      const request = e.takeRequest(g2, i * F)!;
      e.applyReply(
        g2,
        reply(request, 10_000 + i * F, () => 5),
        i * F,
        i * F,
      );
    }
    expect(g2.seq).toBe(40);
    rule.define({ ...api, slotGroups: 1 }, "v3");
    rule.define({ ...api, slotGroups: 4 }, "v4");
    e.check("api", key);
    expect(rule.groupFor(key).index).toBe(2);
    expect(e.takeRequest(rule.groupFor(key), 41 * F)!.seq).toBe(41);
  });

  it("splits a group's keys over consecutive requests so no JSON body exceeds MAX_SYNC_BODY_BYTES (256 keys of 256 characters, some not ASCII), and every key gets its turn", () => {
    const e = engine();
    const g = group(e);
    // 300 keys of 256 characters, every third with 2- and 4-byte UTF-8 characters
    // 256 UTF-16 units, never ending in half a pair (a lone surrogate is not a valid key)
    const keys = Array.from({ length: 300 }, (_, i) =>
      `${i}-`
        .padEnd(256, i % 3 === 0 ? "é😀" : "x")
        .slice(0, 256)
        .replace(/[\ud800-\udbff]$/, "x"),
    );
    for (const key of keys) e.check("api", key);
    const sent: string[] = [];
    const sizes: number[] = [];
    for (let round = 0; round < 6; round++) {
      const request = e.takeRequest(g, round * F);
      if (!request) break;
      sizes.push(request.entries.length);
      expect(Buffer.byteLength(JSON.stringify(request))).toBeLessThanOrEqual(MAX_SYNC_BODY_BYTES);
      sent.push(...request.entries.map((entry) => entry.key));
      e.applyReply(
        g,
        reply(request, 10_000 + round * F, () => 5),
        round * F,
        round * F,
      );
    }
    // the body, not the key count, ended the first request
    expect(sizes[0]).toBeLessThan(MAX_KEYS_PER_SYNC);
    expect(new Set(sent)).toEqual(new Set(keys));
    expect(sent).toHaveLength(300); // each key once: nothing sent twice
  });

  it("idle keys beyond maxKeys are dropped; resolved ones and keys with unreported usage stay", () => {
    const e = engine({ maxKeys: 2, instancesHint: 1 });
    const pinned = e.resolve("api", "pinned");
    for (const key of ["a", "b", "c"]) e.check("api", key);
    e.advance(0); // the loop meets them: idle from now on
    sync(e, 0, () => 5);
    e.check("api", "busy");
    e.advance(10_000);
    expect(e.size).toBe(2);
    expect(e.rule("api")!.handles.get("pinned")).toBe(pinned);
    expect(e.rule("api")!.handles.has("busy")).toBe(true);
  });
});

describe("degraded mode", () => {
  it("keeps the last allowance (not replenished) for keepAllowanceMs, then the safe share", () => {
    const e = engine({ keepAllowanceMs: 1_000 });
    const h = e.resolve("api", "k");
    sync(e, 0, () => 40, { instances: 4 });
    e.unreachable(group(e), 50);
    for (let i = 0; i < 10; i++) e.checkHandle(h);
    e.advance(500);
    expect(h.left).toBe(30);
    e.advance(1_050);
    // share = min(100, 300) / 4 = 25; the 10 admitted during the keep period still count in the window
    expect(h.left).toBe(15);
    expect(e.checkHandle(h, 16).allowed).toBe(false);
    expect(e.checkHandle(h, 15).allowed).toBe(true);
    e.advance(1_100);
    expect(h.left).toBe(0);
    // the 1 s window has slid past the first 10, not the 15 (the 5 s window holds all 25: 75 − 25 = 50 left)
    e.advance(1_600);
    expect(h.left).toBe(10);
    e.advance(2_200);
    expect(h.left).toBe(25);
  });

  it("usage seen while unreachable is kept per epoch and reported when the store returns", () => {
    const e = engine({ keepAllowanceMs: 0, instancesHint: 4 });
    const h = e.resolve("api", "k");
    const g = group(e);
    e.unreachable(g, 0);
    for (const at of [50, 100, 150]) {
      e.advance(at);
      e.checkHandle(h, 2);
    }
    e.advance(200);
    const request = e.takeRequest(g, 200)!;
    expect(request.entries[0]?.usage).toEqual([
      [100, 2],
      [150, 2],
      [200, 2],
    ]);
    e.applyReply(
      g,
      reply(request, 200, () => 60),
      200,
      201,
    );
    e.advance(210);
    expect(h.left).toBe(60);
  });

  it("strict: the fallback applies as soon as no token is held, without waiting for the keep period", () => {
    const e = engine({ keepAllowanceMs: 10_000 });
    const h = e.resolve("pay", "k");
    const g = group(e, "pay");
    sync(e, 0, () => 5, { mode: "strict", validForMs: 200 }, "pay");
    e.unreachable(g, 60);
    e.advance(100);
    expect(h.left).toBe(5);
    e.advance(160);
    expect(h.left).toBe(0);
  });

  it("property: under the safe share, no sliding window of a limit admits more than max / instances", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 8 }),
        fc.integer({ min: 1, max: 200 }),
        fc.array(
          fc.tuple(fc.integer({ min: 0, max: 120 }), fc.integer({ min: 0, max: 30 }), fc.integer({ min: 1, max: 5 })),
          {
            minLength: 1,
            maxLength: 120,
          },
        ),
        (instances, max, steps) => {
          const rule: QuotaRule = {
            ...api,
            limits: [
              { windowMs: 1_000, max },
              { windowMs: 5_000, max: max * 3 },
            ],
          };
          const e = new QuotaEngine({
            instanceId: "i",
            rules: { r: rule },
            syncIntervalMs: F,
            keepAllowanceMs: 0,
            instancesHint: instances,
          });
          const h = e.resolve("r", "k");
          e.unreachable(e.rule("r")!.groups[0]!, 0);
          const admitted: number[] = [];
          let now = 0;
          e.advance(now);
          // each step: the sync loop ticks after a gap, then a burst of requests arrives
          for (const [gap, burst, cost] of steps) {
            now += gap;
            e.advance(now);
            for (let i = 0; i < burst; i++) {
              if (e.checkHandle(h, cost).allowed) for (let c = 0; c < cost; c++) admitted.push(now);
            }
          }
          return rule.limits.every(({ windowMs, max: m }) => {
            const share = Math.floor(m / instances);
            return admitted.every((start, i) => {
              let inWindow = 0;
              for (let j = i; j < admitted.length && (admitted[j] as number) < start + windowMs; j++) inWindow++;
              return inWindow <= share;
            });
          });
        },
      ),
      { numRuns: 150 },
    );
  });
});

describe("key text", () => {
  it("refuses at first sight, naming the key, a key with a lone surrogate or over 256 characters (each would share or fail its slot group's sync)", () => {
    const e = engine();
    for (const key of ["\ud800", "a\udc00b", "x".repeat(257), ""]) {
      expect(() => e.check("api", key)).toThrow(WireError);
      expect(() => e.check("api", key)).toThrow(/^key: /);
    }
    expect(() => e.check("api", "\ud83d\ude00")).not.toThrow();
    expect(group(e).handles.size).toBe(1);
  });
});
