// The sync loop on a fake clock and a fake scheduler, against a transport written here: nothing starts,
// no timer runs, no socket opens.
import { describe, expect, it } from "vitest";
import type { Scheduler } from "../../src/clock.ts";
import { QuotasConfigError, StoreUnreachableError, SyncRejectedError } from "../../src/errors.ts";
import type { QuotaRule, SyncReply, SyncRequest } from "../../src/protocol/index.ts";
import { createQuotas, type QuotasMetrics, type QuotaTransport } from "../../src/quotas.ts";

const api: QuotaRule = {
  mode: "approximate",
  limits: [{ windowMs: 1_000, max: 100 }],
  leaseMs: 200,
  fallback: "share",
  slotGroups: 4,
};

function fakeClock(start = 1_000) {
  let now = start;
  return {
    now: () => now,
    advance: (ms: number) => {
      now += ms;
    },
  };
}

function fakeScheduler() {
  const queue: { delay: number; run: () => void; cancelled: boolean }[] = [];
  const scheduler: Scheduler = {
    schedule(delay, run) {
      const entry = { delay, run, cancelled: false };
      queue.push(entry);
      return {
        cancel: () => {
          entry.cancelled = true;
        },
      };
    },
  };
  return { scheduler, queue };
}

/** A store written in a few lines: every key gets `allowance`; `fail` makes the next calls throw it. */
function fakeStore(allowance = 10, rule: QuotaRule = api) {
  const calls: SyncRequest[] = [];
  let fail: Error | undefined;
  const transport: QuotaTransport = {
    async sync(request, now): Promise<SyncReply> {
      calls.push(structuredClone(request));
      if (fail) throw fail;
      return {
        status: "applied",
        serverTime: now,
        configVersion: "v1",
        instances: 2,
        ...(request.configVersion === "v1" ? {} : { rule }),
        entries: request.entries.map((e) => ({
          mode: "approximate",
          key: e.key,
          allowance,
          validUntil: now + 1_000,
          denyUntil: 0,
          resetAt: now + 1_000,
          used: [0],
        })),
      };
    },
  };
  const failWith = (error: Error | undefined) => {
    fail = error;
  };
  return { transport, calls, failWith };
}

describe("Quotas sync loop", () => {
  it("one call per slot group with traffic, in one round; the reply's rule and allowance are used at once", async () => {
    const store = fakeStore(7);
    const quotas = createQuotas({ transport: store.transport, clock: fakeClock(), rules: { api }, instancesHint: 1 });
    for (let i = 0; i < 40; i++) quotas.check("api", `tenant-${i}`);
    await quotas.sync();
    expect(store.calls.length).toBeGreaterThan(1);
    expect(store.calls.length).toBeLessThanOrEqual(4);
    expect(new Set(store.calls.map((c) => c.group)).size).toBe(store.calls.length);
    expect(store.calls.flatMap((c) => c.entries).length).toBe(40);
    expect(quotas.check("api", "tenant-0")).toMatchObject({ allowed: true, remaining: 6, limit: 100 });
  });

  it("schedules each round within ±20 % of the interval, and stop() cancels and reports what is left", async () => {
    const { scheduler, queue } = fakeScheduler();
    const store = fakeStore();
    const quotas = createQuotas({ transport: store.transport, clock: fakeClock(), scheduler, rules: { api } });
    quotas.start();
    // the tick, and the observer of strict spends (every 10 ms by default)
    expect(queue).toHaveLength(2);
    expect(queue[0]!.delay).toBeGreaterThanOrEqual(40);
    expect(queue[0]!.delay).toBeLessThanOrEqual(60);
    expect(queue[1]!.delay).toBe(10);
    quotas.check("api", "k");
    await quotas.stop();
    expect(queue[0]!.cancelled).toBe(true);
    expect(queue[1]!.cancelled).toBe(true);
    expect(store.calls.flatMap((c) => c.entries)).toMatchObject([{ key: "k", offered: 1 }]);
  });

  it("syncIfStale syncs only when the last round is older than the interval (the Lambda boundary)", async () => {
    const clock = fakeClock();
    const store = fakeStore();
    const quotas = createQuotas({ transport: store.transport, clock, rules: { api }, instancesHint: 1 });
    quotas.check("api", "k");
    await quotas.syncIfStale();
    quotas.check("api", "k");
    clock.advance(49);
    await quotas.syncIfStale();
    expect(store.calls).toHaveLength(1);
    clock.advance(1);
    await quotas.syncIfStale();
    expect(store.calls).toHaveLength(2);
  });

  it("an unreachable store: the same request (same seq) again next round, metrics say degraded since when", async () => {
    const clock = fakeClock();
    const store = fakeStore(10, { ...api, slotGroups: 1 });
    const seen: QuotasMetrics[] = [];
    const errors: Error[] = [];
    const quotas = createQuotas({
      transport: store.transport,
      clock,
      rules: { api: { ...api, slotGroups: 1 } },
      instancesHint: 1,
      onMetrics: (m) => seen.push(m),
      onError: (e) => errors.push(e),
    });
    quotas.check("api", "k");
    store.failWith(new StoreUnreachableError("connect ECONNREFUSED"));
    await quotas.sync();
    clock.advance(50);
    quotas.check("api", "k");
    await quotas.sync();
    expect(store.calls.map((c) => c.seq)).toEqual([1, 1]);
    expect(seen.at(-1)).toMatchObject({ degradedMs: 50, syncErrors: 1, admitted: 1 });
    store.failWith(undefined);
    clock.advance(50);
    await quotas.sync();
    await quotas.sync();
    expect(store.calls.map((c) => c.seq)).toEqual([1, 1, 1, 2]);
    expect(seen.at(-1)).toMatchObject({ degradedMs: 0, syncErrors: 0 });
    expect(errors).toHaveLength(2);
  });

  it("a store that answers with an error: usage goes out again under a new seq", async () => {
    const store = fakeStore(10, { ...api, slotGroups: 1 });
    const quotas = createQuotas({
      transport: store.transport,
      clock: fakeClock(),
      rules: { api: { ...api, slotGroups: 1 } },
    });
    quotas.check("api", "k");
    store.failWith(new SyncRejectedError("ERR bad"));
    await quotas.sync();
    store.failWith(undefined);
    await quotas.sync();
    expect(store.calls.map((c) => [c.seq, c.entries[0]?.offered])).toEqual([
      [1, 1],
      [2, 0],
    ]);
    expect(store.calls[1]!.entries[0]!.usage).toEqual(store.calls[0]!.entries[0]!.usage);
  });

  it("refuses options that cannot work, naming the field", () => {
    const { transport } = fakeStore();
    expect(() => createQuotas({ transport, syncIntervalMs: 0 })).toThrow(/syncIntervalMs/);
    // past Node's longest timer (Infinity included) a timer fires after 1 ms: refused, not a busy loop
    expect(() => createQuotas({ transport, syncIntervalMs: Number.POSITIVE_INFINITY })).toThrow(/syncIntervalMs/);
    expect(() => createQuotas({ transport, observeIntervalMs: Number.POSITIVE_INFINITY })).toThrow(/observeIntervalMs/);
    expect(() => createQuotas({ transport, observeIntervalMs: 2 ** 31 })).toThrow(/observeIntervalMs/);
    expect(() => createQuotas({ transport, observeIntervalMs: 0 })).not.toThrow();
    expect(() => createQuotas({ transport, jitter: 1 })).toThrow(/jitter/);
    expect(() => createQuotas({ transport, instanceId: "has{brace}" })).toThrow(/instanceId/);
    // a strict lease this loop could not spend (ticks up to 60 ms apart): no more than two ticks
    const short: QuotaRule = { ...api, mode: "strict", leaseMs: 120 };
    expect(() => createQuotas({ transport, rules: { pay: short } })).toThrow(
      /^rules\.pay\.leaseMs: a strict lease of 120 ms .*sync interval 50 ms, ticks up to 60 ms apart/,
    );
    expect(() => createQuotas({ transport, rules: { pay: { ...short, leaseMs: 121 } } })).not.toThrow();
  });

  it("reports a strict rule from the store whose lease this loop cannot spend (onError, the field named), and goes on", async () => {
    const short: QuotaRule = { ...api, mode: "strict", leaseMs: 50 };
    const errors: Error[] = [];
    const store = fakeStore(5, short);
    const quotas = createQuotas({ transport: store.transport, clock: fakeClock(), onError: (e) => errors.push(e) });
    quotas.check("pay", "k");
    await quotas.sync();
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(QuotasConfigError);
    expect(errors[0]!.message).toMatch(/^rule pay: leaseMs: a strict lease of 50 ms/);
    // a rule whose lease is long enough says nothing
    const fine = fakeStore(5, { ...short, leaseMs: 200 });
    const quiet = createQuotas({ transport: fine.transport, clock: fakeClock(), onError: (e) => errors.push(e) });
    quiet.check("pay", "k");
    await quiet.sync();
    expect(errors).toHaveLength(1);
  });

  it("ticks on time while a call of another rule hangs: the next tick starts its own round, never sending the hanging group twice", async () => {
    const { scheduler, queue } = fakeScheduler();
    const clock = fakeClock();
    let release: () => void = () => {};
    const hang = new Promise<void>((resolve) => {
      release = resolve;
    });
    const store = fakeStore();
    const calls: string[] = [];
    const transport: QuotaTransport = {
      async sync(request, now) {
        calls.push(`${request.rule}:${request.seq}`);
        if (request.rule === "slow") await hang;
        return store.transport.sync(request, now);
      },
    };
    const quotas = createQuotas({ transport, clock, scheduler, rules: { api, slow: api }, observeIntervalMs: 0 });
    quotas.start();
    quotas.check("slow", "x");
    quotas.check("api", "k");
    clock.advance(50);
    queue[0]!.run(); // the first tick: slow's call hangs, api's is answered
    await new Promise((resolve) => setImmediate(resolve));
    // the next tick was scheduled at once, not after the round
    expect(queue).toHaveLength(2);
    quotas.check("api", "k");
    quotas.check("slow", "x");
    clock.advance(50);
    queue[1]!.run(); // api syncs again; slow's group, still in flight, is not sent twice
    await new Promise((resolve) => setImmediate(resolve));
    expect(calls).toEqual(["api:1", "slow:1", "api:2"]);
    release();
    await quotas.stop();
    // the usage slow saw meanwhile went out after its call settled
    expect(calls.slice(3)).toEqual(["slow:2"]);
  });
});
