// The policy and segment bitmaps a warm container serves: loaded once, re-checked by ETag at most every
// refresh interval, swapped atomically. A policy or bitmap that fails validation never replaces the last
// good rules, and neither does a bitmap that shrinks its segment by more than the allowed share unless the
// operator forced it. The last accepted policy and bitmap of each segment are kept in the store too, so a
// container that starts after a refused upload refuses it as well and serves those copies; only a container
// with neither valid rules nor a good copy fails (RulesUnavailableError) instead of guessing.

import type { Clock } from "../shared/clock.ts";
import { systemClock } from "../shared/clock.ts";
import { ObjectNotFoundError, type RulesRefusal, RulesUnavailableError, SegmentShrinkError } from "../shared/errors.ts";
import type { ObjectStore, ObjectWriter } from "../shared/object-store.ts";
import { DEFAULT_POLICY_KEY, type Policy, parsePolicyText, zoneBitmapKey } from "./policy.ts";
import { parseBitmap, SegmentIndex, ZoneIndex } from "./segment-index.ts";

export interface RulesSourceOptions {
  /**
   * Where the policy and bitmaps are read. A store that can also write keeps each segment's last accepted
   * bitmap (`acceptedCopyKey`), which the shrink check of every container compares with; without one
   * (local files) the check compares with what this container serves for the segment only.
   */
  store: ObjectStore & Partial<ObjectWriter>;
  policyKey?: string;
  /** How long loaded rules are served before the store is asked whether they changed. */
  refreshMs: number;
  clock?: Clock;
  /** The largest share of its users a segment may lose in one update without a force marker (default 0.5). */
  maxShrink?: number;
  /** Told when a changed policy or bitmap was refused (the last good rules stay), at each refresh that sees it. */
  onRejected?: (error: Error) => void;
  /** Told when the copy of a newly accepted bitmap could not be written (the bitmap is served anyway). */
  onCopyFailed?: (error: Error) => void;
  /** The deployment's KEY_NAMESPACE: a policy whose tenant namespaces do not fit beside it is refused. */
  keyNamespace?: string;
  /** Told when new rules are in service. */
  onActivated?: (rules: Rules, tags: Record<string, string>) => void;
}

/** The policy and the segment and zone bitmaps it names, swapped together. */
export interface Rules {
  policy: Policy;
  segments: SegmentIndex;
  /** Which zone each user lives in (absent: every user in the policy's defaultZone). */
  zones?: ZoneIndex;
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
 * The object beside a bitmap that forces one upload of it through the shrink check: it holds the ETag and
 * the store's write time of the upload it allows (`{"etag": ..., "modifiedAt": ms}`), so it never forces a
 * later upload, not even of the same bytes (an S3 ETag is the bytes' MD5: a shrunk export uploaded again
 * weeks later has the same one).
 */
export const allowShrinkMarkerKey = (bitmapKey: string) => `${bitmapKey}.allow-shrink`;

/**
 * The copy of the last bitmap a container accepted for the segment `segment`, and beside it (`.json`) which
 * upload it is (`{"bitmap": key, "etag": ..., "users": n}`). Containers write them when they accept an
 * upload, so the shrink check of a container that starts later compares with the fleet's last accepted
 * bitmap of the segment, not with nothing. Kept by segment name, not by bitmap key: a policy that points a
 * segment at a new object is checked against what the segment held. Policies may not name objects under
 * `accepted/` (policy.ts).
 */
export const acceptedCopyKey = (segment: string) => slotCopyKey(segmentSlot(segment));
/** The same for the bitmap of the users of zone `zone` (`zones/<zone>.roaring`). */
export const acceptedZoneCopyKey = (zone: string) => slotCopyKey(zoneSlot(zone));
/** A bitmap's slot: what its accepted copy, its refusal and its shrink check are kept by. */
const segmentSlot = (segment: string) => `segments/${segment}`;
const zoneSlot = (zone: string) => `zones/${zone}`;
const slotCopyKey = (slot: string) => `accepted/${slot}.roaring`;
const acceptedRecordKey = (slot: string) => `accepted/${slot}.json`;
/**
 * The copy of the last policy a container brought into service, written when it does: a container that starts
 * while the policy object fails validation serves this one (validated again) and names the refused object.
 */
export const acceptedPolicyKey = "accepted/policy.json";

interface AcceptedRecord {
  bitmap: string;
  etag: string;
  users: number;
}

/** A segment's bitmap object as the store's HEAD describes it. */
interface Upload {
  segment: string;
  key: string;
  tag: string;
  modifiedAt: number;
}

/** A segment's bitmap upload that was refused, and what is served in its place. */
interface Refused {
  key: string;
  tag: string;
  error: Error;
  served: Bitmap;
}

/** An unknown channel or quota rule forces a refresh, but not more often than this. */
const UNKNOWN_NAME_REFRESH_MS = 1_000;

export class RulesSource {
  private readonly options: Required<
    Omit<RulesSourceOptions, "onRejected" | "onActivated" | "onCopyFailed" | "keyNamespace">
  > &
    RulesSourceOptions;
  private active?: { rules: Rules; tags: Map<string, string>; bitmaps: Map<string, Bitmap>; checkedAt: number };
  private pending?: Promise<void>;
  /** What the last refresh refused (empty once a refresh succeeds). */
  private refusals: RulesRefusal[] = [];
  /** Bitmap uploads refused (shrinking, or not a bitmap), by segment, until the upload changes (or is forced). */
  private readonly refused = new Map<string, Refused>();
  /** The policy object refused on a cold start, served by its last accepted copy until the object changes. */
  private refusedPolicy?: { tag: string; error: Error; policy: Policy };
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
    const now = this.options.clock.now();
    const fresh = this.freshAt(request, now);
    if (fresh) return fresh;
    if (this.forcesRefresh(request, now)) this.forcedAt = now;
    // one refresh at a time; every caller waits for it
    this.pending ??= this.refresh().finally(() => {
      this.pending = undefined;
    });
    await this.pending;
    if (!this.active) throw new Error("unreachable: refresh neither loaded rules nor threw");
    return this.active.rules;
  }

  /**
   * The rules `current(request)` would answer now without a refresh, or undefined when it would refresh
   * first (or none were loaded): for a caller on every request, which skips current()'s promise when it can.
   */
  fresh(request: { channel?: string; quotaRule?: string } = {}): Rules | undefined {
    return this.freshAt(request, this.options.clock.now());
  }

  private freshAt(request: { channel?: string; quotaRule?: string }, now: number): Rules | undefined {
    const active = this.active;
    if (!active || this.forcesRefresh(request, now)) return undefined;
    const age = now - active.checkedAt;
    const unknownChannel = request.channel !== undefined && !active.rules.policy.channels.includes(request.channel);
    return age < this.options.refreshMs && !(unknownChannel && age >= UNKNOWN_NAME_REFRESH_MS)
      ? active.rules
      : undefined;
  }

  /**
   * A quota rule the rules in service do not list, and no refresh forced for one in the last second. A sync
   * for a just-added rule comes right after the upload, often within a second of this container's last
   * check, and the SDK waits a second after a `norule`: so the gate is the last forced refresh, not the age
   * of the last check.
   */
  private forcesRefresh(request: { quotaRule?: string }, now: number): boolean {
    return (
      this.active !== undefined &&
      request.quotaRule !== undefined &&
      !this.active.rules.policy.quotas.has(request.quotaRule) &&
      now - this.forcedAt >= UNKNOWN_NAME_REFRESH_MS
    );
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
      const refusals: RulesRefusal[] = [];
      let policy: Policy;
      let policyModifiedAt = modifiedAt;
      // the text of a policy read from its object and valid, copied once it is in service
      let fresh: string | undefined;
      if (this.refusedPolicy?.tag === policyTag) {
        // refused before and not uploaded again: its copy stays in its place, the refusal is told again
        policy = this.refusedPolicy.policy;
        refusals.push({ key: policyKey, reason: this.refusedPolicy.error.message, at: startedAt });
        this.options.onRejected?.(this.refusedPolicy.error);
      } else if (active && active.tags.get(policyKey) === policyTag) {
        policy = active.rules.policy;
        policyModifiedAt = active.rules.policyModifiedAt ?? modifiedAt;
      } else {
        const text = Buffer.from(await store.get(policyKey)).toString("utf8");
        try {
          policy = parsePolicyText(text, this.parseOptions());
          fresh = text;
          this.refusedPolicy = undefined;
        } catch (error) {
          // warm: the refresh fails and every rule in service stays; cold: the last accepted copy, if any
          if (active) throw error;
          policy = await this.acceptedPolicy(error as Error);
          this.refusedPolicy = { tag: policyTag, error: error as Error, policy };
          refusals.push({ key: policyKey, reason: (error as Error).message, at: startedAt });
          this.options.onRejected?.(error as Error);
        }
      }
      const tags = new Map([[policyKey, policyTag]]);
      const bitmaps = new Map<string, Bitmap>();
      let changed = !active || active.rules.policy !== policy;
      // zone bitmaps follow the segments' rules: the same validation, shrink check, copies and refusals
      const published = [
        ...policy.segments.flatMap(({ name, bitmap }) =>
          bitmap === undefined ? [] : [{ name: segmentSlot(name), bitmap }],
        ),
        ...policy.zones.map((zone) => ({ name: zoneSlot(zone), bitmap: zoneBitmapKey(zone) })),
      ];
      for (const { name, bitmap } of published) {
        key = bitmap;
        const { etag: tag, modifiedAt } = await store.head(bitmap);
        const upload = { segment: name, key: bitmap, tag, modifiedAt };
        tags.set(bitmap, tag);
        const known = active?.tags.get(bitmap) === tag ? active.bitmaps.get(bitmap) : undefined;
        const refused = this.refused.get(name);
        // a refused upload is looked at again when it changes or its force marker appears (the CLI puts the
        // bitmap, then the marker: a refresh may fall between them)
        if (refused?.key === bitmap && refused.tag === tag && !(await this.forced(upload))) {
          // refused before and not uploaded again: the same bitmap stays in its place, the refusal is told again
          bitmaps.set(bitmap, refused.served);
          refusals.push({ key: bitmap, reason: refused.error.message, at: startedAt });
          this.options.onRejected?.(refused.error);
        } else if (known && !refused) {
          bitmaps.set(bitmap, known);
        } else {
          const served = await this.admit(upload);
          const refusal = this.refused.get(name);
          if (refusal) refusals.push({ key: bitmap, reason: refusal.error.message, at: startedAt });
          if (served !== active?.bitmaps.get(bitmap)) changed = true;
          bitmaps.set(bitmap, served);
        }
      }
      this.refusals = refusals;
      if (!changed && active) {
        active.checkedAt = startedAt;
        return;
      }
      const segments = new SegmentIndex(
        policy.segments.flatMap(({ bitmap }) => (bitmap === undefined ? [] : [bitmaps.get(bitmap) as Bitmap])),
      );
      // a user in two zones refuses the refresh (ZoneOverlapError): warm, the last good rules stay
      key = "zones/";
      const zones =
        policy.zones.length === 0
          ? undefined
          : new ZoneIndex(
              policy.zones.map((zone) => bitmaps.get(zoneBitmapKey(zone)) as Bitmap),
              policy.zones,
            );
      this.active = {
        rules: { policy, segments, ...(zones ? { zones } : {}), policyModifiedAt, loadedAt: startedAt },
        tags,
        bitmaps,
        checkedAt: startedAt,
      };
      this.options.onActivated?.(this.active.rules, Object.fromEntries(tags));
      if (fresh !== undefined) await this.keepAcceptedPolicy(fresh);
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
   * The bitmap to serve for an upload not seen before: the upload itself, unless it would take away more
   * than `maxShrink` of its segment's users and its force marker does not name it. Compared with the
   * segment's last accepted bitmap in the fleet (its record in the store) or, without one, with what this
   * container serves for the segment, whatever object held it. A refused upload is told (onRejected,
   * health) and the last accepted bitmap is served in its place: this container's own, or the stored copy
   * on a cold start; with neither, the refresh fails.
   */
  private async admit(upload: Upload): Promise<Bitmap> {
    const { store, maxShrink } = this.options;
    const { segment, key, tag } = upload;
    const record = await this.acceptedRecord(segment);
    const bytes = await store.get(key);
    const inService = this.servedFor(segment);
    this.refused.delete(segment);
    let bitmap: Bitmap;
    try {
      bitmap = parseBitmap(bytes, key);
    } catch (error) {
      // empty, truncated or corrupt: a warm container's refresh fails (every rule in service stays); a cold
      // one's is refused like a shrink, the last accepted bitmap served in its place
      if (this.active) throw error;
      return this.refuse(upload, error as Error, inService, record);
    }
    if (record?.bitmap === key && record.etag === tag) return bitmap;
    const before = record?.users ?? inService?.size ?? 0;
    const after = bitmap.size;
    if (before > 0 && after < before * (1 - maxShrink) && !(await this.forced(upload))) {
      const named = segment.startsWith("segments/") ? segment.slice("segments/".length) : segment;
      const error = new SegmentShrinkError({ segment: named, key, before, after, maxShrink });
      return this.refuse(upload, error, inService, record);
    }
    await this.keepAcceptedCopy(segment, bytes, { bitmap: key, etag: tag, users: after });
    return bitmap;
  }

  /**
   * Refuses an upload: told (onRejected, health) and remembered until it changes, with the segment's last
   * accepted bitmap served in its place (this container's own, or the stored copy on a cold start). With
   * neither, the refresh fails, and says why.
   */
  private async refuse(
    upload: Upload,
    error: Error,
    inService: Bitmap | undefined,
    record: AcceptedRecord | undefined,
  ): Promise<Bitmap> {
    const { segment, key, tag } = upload;
    const served = inService ?? (record ? await this.acceptedCopy(segment, record, error) : undefined);
    if (!served) throw error;
    this.refused.set(segment, { key, tag, error, served });
    this.options.onRejected?.(error);
    return served;
  }

  private parseOptions() {
    return this.options.keyNamespace === undefined ? {} : { keyNamespace: this.options.keyNamespace };
  }

  /** The last accepted policy (its stored copy, validated again), to serve in place of the refused `refusal`. */
  private async acceptedPolicy(refusal: Error): Promise<Policy> {
    const { store } = this.options;
    const missing = (error: unknown) => (error instanceof ObjectNotFoundError ? undefined : Promise.reject(error));
    const bytes = store.put ? await store.get(acceptedPolicyKey).catch(missing) : undefined;
    if (!bytes) throw refusal;
    try {
      return parsePolicyText(Buffer.from(bytes).toString("utf8"), this.parseOptions());
    } catch (error) {
      const why = `${acceptedPolicyKey}: ${(error as Error).message}`;
      throw new Error(`${refusal.message}; the last accepted policy cannot be served (${why})`, { cause: error });
    }
  }

  /** Copies the policy text just brought into service; a failure is told, and the policy served anyway. */
  private async keepAcceptedPolicy(text: string): Promise<void> {
    try {
      await this.options.store.put?.(acceptedPolicyKey, text);
    } catch (error) {
      this.options.onCopyFailed?.(error as Error);
    }
  }

  /** The bitmap this container serves for the slot `slot` (a segment's or a zone's), if any. */
  private servedFor(slot: string): Bitmap | undefined {
    const active = this.active;
    const policy = active?.rules.policy;
    const bitmap =
      policy?.segments.find(({ name }) => segmentSlot(name) === slot)?.bitmap ??
      policy?.zones.map(zoneBitmapKey).find((key) => `${slot}.roaring` === key);
    return bitmap === undefined ? undefined : active?.bitmaps.get(bitmap);
  }

  /** The fleet's last accepted upload for `segment`; undefined when none was recorded (or no store keeps it). */
  private async acceptedRecord(segment: string): Promise<AcceptedRecord | undefined> {
    if (!this.options.store.put) return undefined;
    let text: string;
    try {
      text = Buffer.from(await this.options.store.get(acceptedRecordKey(segment))).toString("utf8");
    } catch (error) {
      if (error instanceof ObjectNotFoundError) return undefined;
      throw error;
    }
    const record = JSON.parse(text);
    if (
      typeof record?.bitmap !== "string" ||
      typeof record?.etag !== "string" ||
      !Number.isSafeInteger(record?.users)
    ) {
      throw new Error(`${acceptedRecordKey(segment)}: not a record of an accepted bitmap`);
    }
    return record;
  }

  /** The stored copy of the segment's last accepted bitmap, checked against its record, to serve in place of `refusal`. */
  private async acceptedCopy(segment: string, record: AcceptedRecord, refusal: Error): Promise<Bitmap> {
    const copyKey = slotCopyKey(segment);
    try {
      const copy = parseBitmap(await this.options.store.get(copyKey), copyKey);
      if (copy.size !== record.users) throw new Error(`holds ${copy.size} users where its record says ${record.users}`);
      return copy;
    } catch (error) {
      throw new Error(
        `${refusal.message}; the last accepted copy cannot be served (${copyKey}: ${(error as Error).message})`,
        {
          cause: error,
        },
      );
    }
  }

  /** Copies an accepted upload (bytes first, then its record); a failure is told, and the upload served anyway. */
  private async keepAcceptedCopy(segment: string, bytes: Uint8Array, record: AcceptedRecord): Promise<void> {
    const { store } = this.options;
    if (!store.put) return;
    try {
      await store.put(slotCopyKey(segment), bytes);
      await store.put(acceptedRecordKey(segment), JSON.stringify(record));
    } catch (error) {
      this.options.onCopyFailed?.(error as Error);
    }
  }

  /** Whether the upload's force marker names this very upload (its ETag and its write time). */
  private async forced({ key, tag, modifiedAt }: Upload): Promise<boolean> {
    try {
      const marker = JSON.parse(Buffer.from(await this.options.store.get(allowShrinkMarkerKey(key))).toString("utf8"));
      return marker?.etag === tag && marker?.modifiedAt === modifiedAt;
    } catch {
      // no marker (or an unreadable one): the shrink is not forced
      return false;
    }
  }
}
