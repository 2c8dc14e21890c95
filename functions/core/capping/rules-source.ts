// The policy and segment bitmaps a warm container serves: loaded once, re-checked by ETag at most every
// refresh interval, swapped atomically. A policy or bitmap that fails validation never replaces the last
// good rules, and neither does a bitmap that shrinks its segment by more than the allowed share unless the
// operator forced it; a container that has never loaded valid rules fails (RulesUnavailableError) instead
// of guessing.

import type { Clock } from "../shared/clock.ts";
import { systemClock } from "../shared/clock.ts";
import { type RulesRefusal, RulesUnavailableError, SegmentShrinkError } from "../shared/errors.ts";
import type { ObjectStore } from "../shared/object-store.ts";
import { DEFAULT_POLICY_KEY, type Policy, parsePolicyText } from "./policy.ts";
import { parseBitmap, SegmentIndex } from "./segment-index.ts";

export interface RulesSourceOptions {
  store: ObjectStore;
  policyKey?: string;
  /** How long loaded rules are served before the store is asked whether they changed. */
  refreshMs: number;
  clock?: Clock;
  /** The largest share of its users a segment may lose in one update without a force marker (default 0.5). */
  maxShrink?: number;
  /** Told when a changed policy or bitmap was refused (the last good rules stay). */
  onRejected?: (error: Error) => void;
  /** Told when new rules are in service. */
  onActivated?: (rules: Rules, tags: Record<string, string>) => void;
}

/** The policy and the segment bitmaps it names, swapped together. */
export interface Rules {
  policy: Policy;
  segments: SegmentIndex;
  /**
   * When the store last wrote the policy object (its clock: S3's, whole seconds) and when this container
   * started the read that brought it into service (the container's clock, ms). Quotas orders its rule
   * writes by both (`rulesStamp`). Always set by RulesSource; rules built by hand (tests, benches) may
   * leave them out.
   */
  policyModifiedAt?: number;
  loadedAt?: number;
}

type Bitmap = ReturnType<typeof parseBitmap>;

/**
 * The object beside a bitmap that forces one upload of it through the shrink check: it holds the ETag of
 * the bitmap it allows (`{"etag": ...}`), so it never forces a later upload.
 */
export const allowShrinkMarkerKey = (bitmapKey: string) => `${bitmapKey}.allow-shrink`;

/** An unknown channel or quota rule forces a refresh, but not more often than this. */
const UNKNOWN_NAME_REFRESH_MS = 1_000;

export class RulesSource {
  private readonly options: Required<Omit<RulesSourceOptions, "onRejected" | "onActivated">> & RulesSourceOptions;
  private active?: { rules: Rules; tags: Map<string, string>; bitmaps: Map<string, Bitmap>; checkedAt: number };
  private pending?: Promise<void>;
  /** What the last refresh refused (empty once a refresh succeeds). */
  private refusals: RulesRefusal[] = [];
  /** When an unknown quota rule last forced a refresh (ms). */
  private forcedAt = Number.NEGATIVE_INFINITY;

  constructor(options: RulesSourceOptions) {
    this.options = { policyKey: DEFAULT_POLICY_KEY, clock: systemClock, maxShrink: 0.5, ...options };
  }

  /**
   * The rules to decide with now. Rejects with RulesUnavailableError only when no valid rules were ever
   * loaded. A `channel` or `quotaRule` the rules in service do not list makes one refresh first (at most
   * one a second), so a container still on the previous policy learns a newly added channel before judging
   * a message, and a newly added quota rule before answering a sync `norule`.
   */
  async current(request: { channel?: string; quotaRule?: string } = {}): Promise<Rules> {
    const { clock, refreshMs } = this.options;
    const active = this.active;
    if (active) {
      const now = clock.now();
      const age = now - active.checkedAt;
      const { policy } = active.rules;
      const unknownChannel = request.channel !== undefined && !policy.channels.includes(request.channel);
      // A sync for a just-added rule comes right after the upload, often within a second of this
      // container's last check, and the SDK waits a second after a `norule`: so the gate is the last
      // forced refresh, not the age of the last check.
      const unknownRule =
        request.quotaRule !== undefined &&
        !policy.quotas.has(request.quotaRule) &&
        now - this.forcedAt >= UNKNOWN_NAME_REFRESH_MS;
      if (unknownRule) this.forcedAt = now;
      else if (age < refreshMs && !(unknownChannel && age >= UNKNOWN_NAME_REFRESH_MS)) return active.rules;
    }
    // one refresh at a time; every caller waits for it
    this.pending ??= this.refresh().finally(() => {
      this.pending = undefined;
    });
    await this.pending;
    if (!this.active) throw new Error("unreachable: refresh neither loaded rules nor threw");
    return this.active.rules;
  }

  /** For health: the version in service (if any) and what the last refresh refused, with why. */
  status(): { policyVersion?: string; refused: readonly RulesRefusal[] } {
    const version = this.active?.rules.policy.version;
    return { ...(version === undefined ? {} : { policyVersion: version }), refused: this.refusals };
  }

  private async refresh(): Promise<void> {
    const { store, policyKey, clock } = this.options;
    const startedAt = clock.now();
    // the object being read, named in the refusal when it fails
    let key = policyKey;
    try {
      const { etag: policyTag, modifiedAt } = await store.head(policyKey);
      const active = this.active;
      let policy: Policy;
      let policyModifiedAt = modifiedAt;
      if (active && active.tags.get(policyKey) === policyTag) {
        policy = active.rules.policy;
        policyModifiedAt = active.rules.policyModifiedAt ?? modifiedAt;
      } else {
        policy = parsePolicyText(Buffer.from(await store.get(policyKey)).toString("utf8"));
      }
      const tags = new Map([[policyKey, policyTag]]);
      const bitmaps = new Map<string, Bitmap>();
      let changed = !active || active.rules.policy !== policy;
      for (const { name, bitmap } of policy.segments) {
        if (bitmap === undefined) continue;
        key = bitmap;
        const { etag: tag } = await store.head(bitmap);
        tags.set(bitmap, tag);
        const known = active?.tags.get(bitmap) === tag ? active.bitmaps.get(bitmap) : undefined;
        if (known) {
          bitmaps.set(bitmap, known);
        } else {
          const parsed = parseBitmap(await store.get(bitmap), bitmap);
          await this.checkShrink({ segment: name, key: bitmap, tag, bitmap: parsed });
          bitmaps.set(bitmap, parsed);
          changed = true;
        }
      }
      this.refusals = [];
      if (!changed && active) {
        active.checkedAt = startedAt;
        return;
      }
      const segments = new SegmentIndex(
        policy.segments.flatMap(({ bitmap }) => (bitmap === undefined ? [] : [bitmaps.get(bitmap) as Bitmap])),
      );
      this.active = {
        rules: { policy, segments, policyModifiedAt, loadedAt: startedAt },
        tags,
        bitmaps,
        checkedAt: startedAt,
      };
      this.options.onActivated?.(this.active.rules, Object.fromEntries(tags));
    } catch (error) {
      this.refusals = [{ key, reason: (error as Error).message, at: startedAt }];
      if (!this.active) {
        // A configuration fault is the server's, not any message's: callers retry, never dead-letter.
        throw new RulesUnavailableError(this.refusals, { cause: error });
      }
      // keep serving the last good rules; look again after the next interval
      this.active.checkedAt = startedAt;
      this.options.onRejected?.(error as Error);
    }
  }

  /**
   * Refuses a bitmap that would take away more than `maxShrink` of its segment's users (compared with the
   * same segment in service), unless its force marker names this very upload.
   */
  private async checkShrink(update: { segment: string; key: string; tag: string; bitmap: Bitmap }): Promise<void> {
    const active = this.active;
    if (!active) return;
    const { policy, segments } = active.rules;
    // the index's bitmaps are those of the listed segments, in policy order
    const index = policy.segments.filter((s) => s.bitmap !== undefined).findIndex((s) => s.name === update.segment);
    const before = index < 0 ? 0 : (segments.sizes()[index] ?? 0);
    const after = update.bitmap.size;
    if (before === 0 || after >= before * (1 - this.options.maxShrink)) return;
    const forcedTag = await this.markerTag(update.key);
    if (forcedTag === update.tag) return;
    throw new SegmentShrinkError({ ...update, before, after, maxShrink: this.options.maxShrink });
  }

  private async markerTag(bitmapKey: string): Promise<string | undefined> {
    try {
      const marker = JSON.parse(
        Buffer.from(await this.options.store.get(allowShrinkMarkerKey(bitmapKey))).toString("utf8"),
      );
      return typeof marker?.etag === "string" ? marker.etag : undefined;
    } catch {
      // no marker (or an unreadable one): the shrink is not forced
      return undefined;
    }
  }
}
