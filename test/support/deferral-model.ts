// A reference model of capped-send deferral, written from the contract (docs/api.md, "Deferral of capped
// sends"), not from the script: a send at `at` is admitted when, for every cap, each window (x - W, x] that
// contains `at` holds fewer than max counted sends (of the cap's channel, or of every channel for "*"). A
// capped send of a deferring campaign is eligible at the earliest instant t >= the decision's instant, t > at,
// that is admitted; it is deferred there when t - since <= maxMs, dropped otherwise (or when a cap of 0 never
// admits it).

export interface ModelCap {
  /** "push" or "*". */
  channel: string;
  windowMs: number;
  max: number;
}

export interface ModelSend {
  at: number;
  channel: string;
}

export class DeferralModel {
  /** Per user: the sends counted, in any order. */
  private readonly sends = new Map<number, ModelSend[]>();
  /** Per user: the campaigns counted for it (a campaign counts a user once). */
  private readonly counted = new Map<number, Set<string>>();

  constructor(readonly caps: readonly ModelCap[]) {}

  sendsOf(user: number): readonly ModelSend[] {
    return this.sends.get(user) ?? [];
  }

  /** The first cap (in order) with a full window containing `at`; -1 when every cap admits the send. */
  firstDenying(user: number, channel: string, at: number): number {
    const sends = this.sendsOf(user);
    for (let c = 0; c < this.caps.length; c++) {
      const cap = this.caps[c] as ModelCap;
      if (cap.channel !== "*" && cap.channel !== channel) continue;
      if (cap.max === 0) return c;
      const times = sends.filter((s) => cap.channel === "*" || s.channel === cap.channel).map((s) => s.at);
      // the fullest window around `at`: its right end x in [at, at + W) at `at` or at a send
      const ends = [at, ...times.filter((t) => t >= at && t < at + cap.windowMs)];
      for (const x of ends) {
        const used = times.filter((t) => t > x - cap.windowMs && t <= x).length;
        if (used >= cap.max) return c;
      }
    }
    return -1;
  }

  /** The earliest admitted instant t >= from, t > at; undefined when a cap of 0 applies. */
  eligibleAt(user: number, channel: string, at: number, from: number): number | undefined {
    const applying = this.caps.filter((cap) => cap.channel === "*" || cap.channel === channel);
    if (applying.some((cap) => cap.max === 0)) return undefined;
    const start = Math.max(from, at + 1);
    // admission only begins where a send leaves a window: at start or at a send's time + W
    const candidates = [start];
    for (const s of this.sendsOf(user))
      for (const cap of applying)
        if ((cap.channel === "*" || s.channel === cap.channel) && s.at + cap.windowMs > start)
          candidates.push(s.at + cap.windowMs);
    candidates.sort((a, b) => a - b);
    for (const t of candidates) if (this.firstDenying(user, channel, t) < 0) return t;
    throw new Error("no admitted instant: the last candidate empties every window");
  }

  /** Decides and counts one send; "duplicate" when the campaign already counted the user. */
  decide(
    user: number,
    send: { campaignId: string; channel: string; at: number; judgedAt: number },
    defer?: { maxMs: number; since?: number },
  ): { decision: "allowed" | "duplicate" | "capped" | "deferred" | "dropped"; cap?: number; eligibleAt?: number } {
    const counted = this.counted.get(user) ?? new Set<string>();
    const identity = `${send.campaignId}:${send.channel}`;
    if (counted.has(identity)) return { decision: "duplicate" };
    const cap = this.firstDenying(user, send.channel, send.at);
    if (cap < 0) {
      counted.add(identity);
      this.counted.set(user, counted);
      const sends = this.sends.get(user) ?? [];
      sends.push({ at: send.at, channel: send.channel });
      this.sends.set(user, sends);
      return { decision: "allowed" };
    }
    if (!defer) return { decision: "capped", cap };
    const eligibleAt = this.eligibleAt(user, send.channel, send.at, send.judgedAt);
    const since = defer.since ?? send.judgedAt;
    if (eligibleAt === undefined) return { decision: "dropped", cap };
    return { decision: eligibleAt - since <= defer.maxMs ? "deferred" : "dropped", cap, eligibleAt };
  }

  /** True when some window of some cap holds more than max of the user's counted sends. */
  overMax(user: number): boolean {
    const sends = this.sendsOf(user);
    return this.caps.some((cap) => {
      const times = sends.filter((s) => cap.channel === "*" || s.channel === cap.channel).map((s) => s.at);
      return times.some((x) => times.filter((t) => t > x - cap.windowMs && t <= x).length > cap.max);
    });
  }
}
