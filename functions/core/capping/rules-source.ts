// The policy and segment bitmaps a warm container serves: loaded once, re-checked by ETag at most every
// refresh interval, swapped atomically. A policy or bitmap that fails validation never replaces the last
// good rules; a container that has never loaded valid rules fails instead of guessing.

import type { Clock } from "../shared/clock.ts";
import { systemClock } from "../shared/clock.ts";
import type { ObjectStore } from "../shared/object-store.ts";
import { DEFAULT_POLICY_KEY, type Policy, parsePolicyText } from "./policy.ts";
import { parseBitmap, SegmentIndex } from "./segment-index.ts";

export interface RulesSourceOptions {
  store: ObjectStore;
  policyKey?: string;
  /** How long loaded rules are served before the store is asked whether they changed. */
  refreshMs: number;
  clock?: Clock;
  /** Told when a changed policy or bitmap was refused (the last good rules stay). */
  onRejected?: (error: Error) => void;
  /** Told when new rules are in service. */
  onActivated?: (rules: Rules, tags: Record<string, string>) => void;
}

/** The policy and the segment bitmaps it names, swapped together. */
export interface Rules {
  policy: Policy;
  segments: SegmentIndex;
}

type Bitmap = ReturnType<typeof parseBitmap>;

export class RulesSource {
  private readonly options: Required<Omit<RulesSourceOptions, "onRejected" | "onActivated">> & RulesSourceOptions;
  private active?: { rules: Rules; tags: Map<string, string>; bitmaps: Map<string, Bitmap>; checkedAt: number };
  private pending?: Promise<void>;

  constructor(options: RulesSourceOptions) {
    this.options = { policyKey: DEFAULT_POLICY_KEY, clock: systemClock, ...options };
  }

  /** The rules to decide with now. Rejects only when no valid rules were ever loaded. */
  async current(): Promise<Rules> {
    const active = this.active;
    if (active && this.options.clock.now() - active.checkedAt < this.options.refreshMs) return active.rules;
    // one refresh at a time; every caller waits for it
    this.pending ??= this.refresh().finally(() => {
      this.pending = undefined;
    });
    await this.pending;
    if (!this.active) throw new Error("unreachable: refresh neither loaded rules nor threw");
    return this.active.rules;
  }

  private async refresh(): Promise<void> {
    const { store, policyKey, clock } = this.options;
    const startedAt = clock.now();
    try {
      const policyTag = await store.etag(policyKey);
      const active = this.active;
      let policy: Policy;
      if (active && active.tags.get(policyKey) === policyTag) {
        policy = active.rules.policy;
      } else {
        policy = parsePolicyText(Buffer.from(await store.get(policyKey)).toString("utf8"));
      }
      const tags = new Map([[policyKey, policyTag]]);
      const bitmaps = new Map<string, Bitmap>();
      let changed = !active || active.rules.policy !== policy;
      for (const { bitmap: key } of policy.segments) {
        if (key === undefined) continue;
        const tag = await store.etag(key);
        tags.set(key, tag);
        const known = active?.tags.get(key) === tag ? active.bitmaps.get(key) : undefined;
        if (known) {
          bitmaps.set(key, known);
        } else {
          bitmaps.set(key, parseBitmap(await store.get(key), key));
          changed = true;
        }
      }
      if (!changed && active) {
        active.checkedAt = startedAt;
        return;
      }
      const segments = new SegmentIndex(
        policy.segments.flatMap(({ bitmap }) => (bitmap === undefined ? [] : [bitmaps.get(bitmap) as Bitmap])),
      );
      this.active = { rules: { policy, segments }, tags, bitmaps, checkedAt: startedAt };
      this.options.onActivated?.(this.active.rules, Object.fromEntries(tags));
    } catch (error) {
      if (!this.active) throw error;
      // keep serving the last good rules; look again after the next interval
      this.active.checkedAt = startedAt;
      this.options.onRejected?.(error as Error);
    }
  }
}
