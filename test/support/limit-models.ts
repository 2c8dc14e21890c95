// Reference models of the five rate-limit algorithms, as docs/api.md states them (replay and parameter
// change rules included), written for clarity rather than speed: refills simulated period by period, the
// sliding log as a plain array of charges, retry times found by search, GCRA through the redis-cell port
// (remaining in whole ns, see GcraModel).
// The Lua scripts must answer exactly as these do.
import { type CellQuota, emissionIntervalNs, rateLimit } from "./redis-cell.ts";

/** A script's reply for one limit: retryAfterMs is 0 when allowed. */
export interface ModelReply {
  allowed: boolean;
  limit: number;
  remaining: number;
  resetAt: number;
  retryAfterMs: number;
}

/** A verdict and what charging it would change, not applied yet (several limits commit all or none). */
export interface ModelDecision {
  reply: ModelReply;
  commit(): void;
}

export interface LimitModel<P> {
  decide(now: number, cost: number, params: P): ModelDecision;
  /** What a denied request does anyway (a strict token bucket restarts its refill clock). */
  onDeny?(now: number, params: P): void;
}

export interface WindowParams {
  max: number;
  windowMs: number;
}
export interface BucketParams {
  max: number;
  refillAmount: number;
  refillEveryMs: number;
  strict: boolean;
}
export type GcraParams = CellQuota;

/** One limit alone (POST /v1/limit): charged when allowed. */
export function checkOne<P>(model: LimitModel<P>, now: number, cost: number, params: P): ModelReply {
  const decision = model.decide(now, cost, params);
  if (decision.reply.allowed) decision.commit();
  else model.onDeny?.(now, params);
  return decision.reply;
}

/** Several limits, all charged or none (POST /v1/limits); on a denial every remaining is what is left now. */
export function checkAll(
  limits: { model: LimitModel<unknown>; cost: number; params: unknown }[],
  now: number,
): { allowed: boolean; results: ModelReply[] } {
  const decisions = limits.map((l) => l.model.decide(now, l.cost, l.params));
  const allowed = decisions.every((d) => d.reply.allowed);
  if (allowed) {
    for (const d of decisions) d.commit();
    return { allowed, results: decisions.map((d) => d.reply) };
  }
  const results = limits.map((l, i) => ({
    ...(decisions[i] as ModelDecision).reply,
    remaining: l.model.decide(now, 0, l.params).reply.remaining,
  }));
  limits.forEach((l, i) => {
    if (!(decisions[i] as ModelDecision).reply.allowed) l.model.onDeny?.(now, l.params);
  });
  return { allowed, results };
}

const nothing = () => {};
const alignedStart = (now: number, windowMs: number) => now - (now % windowMs);

export class FixedWindowModel implements LimitModel<WindowParams> {
  private state?: { end: number; count: number };

  decide(now: number, cost: number, { max, windowMs }: WindowParams): ModelDecision {
    // a request dated before the stored window's end counts in it; otherwise the epoch-aligned window, which
    // still holds the stored count when the stored window ended inside it (windowMs grew)
    const s = this.state;
    const open = s && now < s.end ? s : undefined;
    const start = alignedStart(now, windowMs);
    const end = open?.end ?? start + windowMs;
    const count = open?.count ?? (s && s.end > start ? s.count : 0);
    // what it counts is all back at its end, or, when windowMs changed so that a stored end is no boundary of
    // the new length, at the first boundary after it (until then the stored count still counts)
    const reset = end % windowMs === 0 ? end : end - (end % windowMs) + windowMs;
    if (count + cost <= max) {
      return {
        reply: { allowed: true, limit: max, remaining: max - count - cost, resetAt: reset, retryAfterMs: 0 },
        commit: () => {
          if (cost > 0) this.state = { end, count: count + cost };
        },
      };
    }
    return {
      reply: {
        allowed: false,
        limit: max,
        remaining: Math.max(0, max - count),
        resetAt: reset,
        retryAfterMs: reset - now,
      },
      commit: nothing,
    };
  }
}

interface CounterView {
  start: number;
  end: number;
  previous: number;
  current: number;
}

export class SlidingWindowModel implements LimitModel<WindowParams> {
  private state?: CounterView;

  /** The window a request at `now` falls in, with its counts. */
  private view(now: number, windowMs: number): CounterView {
    const s = this.state;
    if (s && now < s.end) return s;
    const start = alignedStart(now, windowMs);
    const end = start + windowMs;
    // the stored window is the previous one only if it ends where this one starts (or inside it, after a
    // change of windowMs: this one then starts at that end)
    if (s && s.end >= start) return { start: s.end, end, previous: s.current, current: 0 };
    return { start, end, previous: 0, current: 0 };
  }

  /** Room left once the request is counted, times the window's length (BigInt: the products pass 2^53). */
  private room(v: CounterView, now: number, cost: number, max: number): bigint {
    const length = BigInt(v.end - v.start);
    const t = Math.max(now, v.start);
    return BigInt(max) * length - (BigInt(v.previous) * BigInt(v.end - t) + BigInt(v.current + cost) * length);
  }

  /** floor(room / length), with BigInt division's truncation corrected towards minus infinity. */
  private static floorOver(room: bigint, length: number): number {
    const l = BigInt(length);
    const q = room / l;
    return Number(room < 0n && q * l !== room ? q - 1n : q);
  }

  decide(now: number, cost: number, { max, windowMs }: WindowParams): ModelDecision {
    const v = this.view(now, windowMs);
    const length = v.end - v.start;
    const nextEnd = v.end - (v.end % windowMs) + windowMs;
    const room = this.room(v, now, cost, max);
    if (room >= 0n) {
      let resetAt = now;
      if (v.current + cost > 0) resetAt = nextEnd;
      else if (v.previous > 0) resetAt = v.end;
      return {
        reply: {
          allowed: true,
          limit: max,
          remaining: SlidingWindowModel.floorOver(room, length),
          resetAt,
          retryAfterMs: 0,
        },
        commit: () => {
          if (cost > 0) this.state = { ...v, current: v.current + cost };
        },
      };
    }
    // the first ms at which the same request fits, nothing else happening (room only grows with time)
    let lo = now + 1;
    let hi = nextEnd + windowMs;
    while (lo < hi) {
      const mid = Math.floor((lo + hi) / 2);
      if (this.room(this.view(mid, windowMs), mid, cost, max) >= 0n) hi = mid;
      else lo = mid + 1;
    }
    return {
      reply: {
        allowed: false,
        limit: max,
        remaining: Math.max(0, SlidingWindowModel.floorOver(this.room(v, now, 0, max), length)),
        resetAt: v.current > 0 ? nextEnd : v.end,
        retryAfterMs: lo - now,
      },
      commit: nothing,
    };
  }
}

export class TokenBucketModel implements LimitModel<BucketParams> {
  private state?: { tokens: number; last: number; max: number };

  /** Tokens and refill clock at `now`, refilled one period at a time. */
  private view(now: number, p: BucketParams): { tokens: number; last: number } {
    if (!this.state) return { tokens: p.max, last: now };
    let tokens = Math.min(p.max, Math.max(0, this.state.tokens + p.max - this.state.max));
    let last = this.state.last;
    if (now > last) {
      while (tokens < p.max && last + p.refillEveryMs <= now) {
        tokens = Math.min(p.max, tokens + p.refillAmount);
        last += p.refillEveryMs;
      }
      if (tokens === p.max) last = now;
    }
    return { tokens, last };
  }

  /** When `tokens` with refill clock `last` reach `want`, refilling period by period. */
  private reach(tokens: number, last: number, want: number, p: BucketParams, now: number): number {
    if (tokens >= want) return Math.max(now, last);
    let at = last;
    let have = tokens;
    while (have < want) {
      have += p.refillAmount;
      at += p.refillEveryMs;
    }
    return at;
  }

  decide(now: number, cost: number, p: BucketParams): ModelDecision {
    const { tokens, last } = this.view(now, p);
    if (tokens >= cost) {
      const left = tokens - cost;
      return {
        reply: {
          allowed: true,
          limit: p.max,
          remaining: left,
          resetAt: this.reach(left, last, p.max, p, now),
          retryAfterMs: 0,
        },
        commit: () => {
          if (cost > 0) this.state = { tokens: left, last, max: p.max };
        },
      };
    }
    const restart = p.strict ? Math.max(now, last) : last;
    return {
      reply: {
        allowed: false,
        limit: p.max,
        remaining: tokens,
        resetAt: this.reach(tokens, restart, p.max, p, now),
        retryAfterMs: this.reach(tokens, restart, cost, p, now) - now,
      },
      commit: nothing,
    };
  }

  onDeny(now: number, p: BucketParams): void {
    if (!p.strict) return;
    const { tokens, last } = this.view(now, p);
    this.state = { tokens, last: Math.max(now, last), max: p.max };
  }
}

export class SlidingLogModel implements LimitModel<WindowParams> {
  private entries: { at: number; cost: number }[] = [];

  decide(now: number, cost: number, { max, windowMs }: WindowParams): ModelDecision {
    const newest = this.entries.at(-1)?.at;
    // a request dated before the newest charge is decided and recorded at its time
    const t = Math.max(now, newest ?? now);
    const usedAt = (x: number) => this.entries.filter((e) => e.at > x - windowMs).reduce((sum, e) => sum + e.cost, 0);
    const used = usedAt(t);
    if (used + cost <= max) {
      let resetAt = t;
      if (cost > 0) resetAt = t + windowMs;
      else if (used > 0) resetAt = (newest as number) + windowMs;
      return {
        reply: { allowed: true, limit: max, remaining: max - used - cost, resetAt, retryAfterMs: 0 },
        commit: () => {
          if (cost === 0) return;
          this.entries = this.entries.filter((e) => e.at > t - windowMs);
          this.entries.push({ at: t, cost });
        },
      };
    }
    // it fits once enough of the oldest charges have aged out: at some charge's time + window
    const retryAt = this.entries.map((e) => e.at + windowMs).find((x) => x > t && usedAt(x) + cost <= max);
    return {
      reply: {
        allowed: false,
        limit: max,
        remaining: Math.max(0, max - used),
        resetAt: (newest as number) + windowMs,
        retryAfterMs: (retryAt as number) - now,
      },
      commit: nothing,
    };
  }
}

export class GcraModel implements LimitModel<GcraParams> {
  private store = new Map<string, bigint>();

  decide(now: number, cost: number, quota: GcraParams): ModelDecision {
    // redis-cell, except that a peek or a denial writes nothing (redis-cell stores max(TAT, now) on a peek)
    // and that remaining is counted in whole ns (redis-cell truncates both times to us first, which
    // overstates it when the emission interval is not a whole number of us)
    const scratch = new Map(this.store);
    const nowNs = BigInt(now) * 1_000_000n;
    const result = rateLimit(scratch, "k", quota, cost, nowNs);
    const interval = emissionIntervalNs(quota);
    const next = interval * BigInt(quota.burst + 1) - result.resetAfterNs;
    const ceilMs = (ns: bigint) => Number((ns + 999_999n) / 1_000_000n);
    return {
      reply: {
        allowed: !result.limited,
        limit: result.limit,
        remaining: next > 0n ? Number(next / interval) : 0,
        resetAt: ceilMs(nowNs + result.resetAfterNs),
        retryAfterMs: result.limited ? ceilMs(result.retryAfterNs) : 0,
      },
      commit: () => {
        if (cost > 0) this.store = scratch;
      },
    };
  }
}
