// The script profiles of a batch with calendar caps: a segment's calendar caps count the period of each
// user's own zone, so its users take one profile per set of periods their zones give (zones with the same
// offsets share one), with each calendar cap's period boundaries as the script takes them.
import { MAX_FUTURE_MS } from "../shared/clock.ts";
import { periodBoundaries } from "./calendar-windows.ts";
import type { ScriptCap, ScriptProfile } from "./cap-sends-script.ts";
import type { Policy } from "./policy.ts";
import type { ZoneIndex } from "./segment-index.ts";

/** The script numbers a user's profile in one byte. */
export const MAX_CALENDAR_PROFILES = 256;

/** A batch's users need more profiles than one numbering holds: the capper decides it in parts (batch-parts.ts). */
export class ProfileLimitError extends Error {}

/**
 * Profiles of one decision instant (`at`, `now`), growing as batches bring new segment and zone pairs: batches
 * decided together with one instant share the same array, so their script calls can be shared too.
 */
export class CalendarProfiles {
  readonly profiles: ScriptProfile[] = [];
  private readonly numberOf = new Map<string, number>();
  private readonly boundariesOf = new Map<string, number[]>();

  constructor(
    private readonly policy: Policy,
    private readonly base: readonly ScriptProfile[],
    private readonly at: number,
    /** After it no send can be counted yet: the clock and the future bound (later sends are refused). */
    private readonly until: number,
  ) {}

  /** Each user's profile number (sortedIds' zones by `zones`; without an index, everyone's in the default zone). */
  profileOf(sortedIds: Uint32Array, segmentOf: Uint8Array, zones: ZoneIndex | undefined): Uint8Array {
    const zoneNames = [...this.policy.zones, this.policy.defaultZone];
    const pairOf = this.pairsOf(sortedIds, segmentOf, zones);
    const result = new Uint8Array(sortedIds.length);
    // each segment and zone pair's number, looked up once per batch (-1: not yet)
    const numbers = new Int16Array(this.policy.segments.length * zoneNames.length).fill(-1);
    for (let j = 0; j < sortedIds.length; j++) {
      const pair = pairOf[j] as number;
      let number = numbers[pair] as number;
      if (number < 0) {
        number = this.numberFor(Math.floor(pair / zoneNames.length), zoneNames[pair % zoneNames.length] as string);
        numbers[pair] = number;
      }
      result[j] = number;
    }
    return result;
  }

  /** Each user's segment and zone pair: segment × (zones + 1) + zone, the default zone last. */
  pairsOf(sortedIds: Uint32Array, segmentOf: Uint8Array, zones: ZoneIndex | undefined): Uint32Array {
    const zoneCount = this.policy.zones.length + 1;
    const zoneOf = zones ? zones.resolveSorted(sortedIds) : undefined;
    const pairs = new Uint32Array(sortedIds.length);
    for (let j = 0; j < sortedIds.length; j++) {
      const zone = zoneOf ? (zoneOf[j] as number) : this.policy.zones.length;
      pairs[j] = (segmentOf[j] as number) * zoneCount + zone;
    }
    return pairs;
  }

  /** Numbers the profile of `pair` (pairsOf()) unless this numbering is full: false then. */
  tryNumber(pair: number): boolean {
    const zoneCount = this.policy.zones.length + 1;
    const zone = pair % zoneCount;
    const zoneName = zone === this.policy.zones.length ? this.policy.defaultZone : (this.policy.zones[zone] as string);
    try {
      this.numberFor(Math.floor(pair / zoneCount), zoneName);
      return true;
    } catch (error) {
      if (error instanceof ProfileLimitError) return false;
      throw error;
    }
  }

  private numberFor(segment: number, zone: string): number {
    const caps = (this.base[segment] as ScriptProfile).caps;
    const periods = caps.map((cap) => (cap.calendar ? this.boundaries(zone, cap) : undefined));
    // a segment without calendar caps has one profile for every zone
    const key = `${segment}|${periods.map((period) => period?.join(",") ?? "").join("|")}`;
    let number = this.numberOf.get(key);
    if (number === undefined) {
      number = this.profiles.length;
      if (number >= MAX_CALENDAR_PROFILES)
        throw new ProfileLimitError(
          `a batch needs more than ${MAX_CALENDAR_PROFILES} profiles (segments × zones with distinct calendar periods)`,
        );
      const base = this.base[segment] as ScriptProfile;
      this.profiles.push({
        ...base,
        caps: base.caps.map((cap, i): ScriptCap => {
          const period = periods[i];
          return period ? { ...cap, period } : cap;
        }),
      });
      this.numberOf.set(key, number);
    }
    return number;
  }

  private boundaries(zone: string, cap: ScriptCap): number[] {
    const kind = cap.calendar as NonNullable<ScriptCap["calendar"]>;
    const key = `${zone}\n${kind}`;
    let boundaries = this.boundariesOf.get(key);
    if (boundaries === undefined) {
      boundaries = periodBoundaries(zone, kind, this.at, this.until, this.policy.weekStarts);
      this.boundariesOf.set(key, boundaries);
    }
    return boundaries;
  }
}

/** The instant after which no send can be counted yet, for a batch decided at `at` by the clock `now`. */
export const countedUntil = (at: number, now: number): number => Math.max(at, now) + MAX_FUTURE_MS;
