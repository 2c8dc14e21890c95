// The capping policy (`config/policy.json`): the schema, its cross-field rules, and the compiled form the
// capper uses (for each segment and channel, the caps that apply, in order).
import { z } from "zod";
import { tenantNamespaceProblem } from "../../../sdk/src/protocol/index.ts";
import { MAX_FUTURE_MS } from "../shared/clock.ts";
import { MAX_WINDOW_MS, MIN_WINDOW_MS, parseDuration } from "../shared/duration.ts";
import { InvalidPolicyError } from "../shared/errors.ts";
import { compileQuotaRules, type PublishedQuotaRule, quotaRulesSchema } from "../shared/quota-rules.ts";
import { DEFAULT_ON_STORE_LOSS, type OnStoreLoss, STORE_LOSS_POLICIES } from "../shared/store-epoch.ts";
import { Tenancy, tenantsSchema } from "../shared/tenants.ts";
import { describeIssues } from "../shared/validation.ts";
import {
  CALENDAR_MAX_MS,
  CALENDAR_WINDOWS,
  type CalendarWindow,
  DEFAULT_WEEK_START,
  isCalendarWindow,
  type WeekStart,
  weekStartSchema,
} from "./calendar-windows.ts";
import { type Reserve, reservedInAll, reserveSchema } from "./priority.ts";
import {
  compileWindows,
  longestFreeMinutes,
  MIN_FREE_MINUTES,
  type QuietWindow,
  quietHoursSchema,
  zoneSchema,
} from "./quiet-hours.ts";

/** Each allowed send is kept in the user's log, so `max` bounds the log's length. */
export const MAX_CAP = 10_000;
/** A decision names the cap that bit by its position; the script's reply byte bounds the count. */
export const MAX_CAPS_PER_CHANNEL = 32;
/** The script stores a channel as one byte. */
export const MAX_CHANNELS = 250;
/** How far back `at` may go when the policy has no cap at all. */
export const DEFAULT_BACKFILL_MS = 30 * 86_400_000;
export const ALL_CHANNELS = "*";
/**
 * How long after a send was counted its message may still come back without an operator: the campaign
 * queue's visibility timeout × maxReceiveCount (infra: 6 × the consumer's 60 s timeout × 5 receives).
 * Deployments pass their own through CAMPAIGN_REDELIVERY_SECONDS (functions/app/environment.ts).
 */
export const DEFAULT_REDELIVERY_MS = 30 * 60_000;
/** Where the policy lives in the bucket unless POLICY_KEY says otherwise. */
export const DEFAULT_POLICY_KEY = "config/policy.json";

/** Channel and segment names: also file names (`<segment>.roaring`), so never a path separator. */
export const NAME_PATTERN = /^[a-z0-9][a-z0-9_-]{0,63}$/;
const name = (what: string) => z.string().regex(NAME_PATTERN, `expected a ${what} name of a-z, 0-9, "_" or "-"`);

// a rolling duration, or a calendar period of the user's zone (calendar-windows.ts)
const window = z.string().superRefine((text, ctx) => {
  if (isCalendarWindow(text)) return;
  const ms = parseDuration(text);
  if (ms === undefined)
    ctx.addIssue({
      code: "custom",
      message: `expected e.g. "7d", or a calendar window (${CALENDAR_WINDOWS.map((w) => `"${w}"`).join(", ")})`,
    });
  else if (ms < MIN_WINDOW_MS || ms > MAX_WINDOW_MS)
    ctx.addIssue({ code: "custom", message: "expected a window from 1s to 30d" });
});

const capSchema = z
  .strictObject({
    window,
    max: z.int(`expected an integer from 0 to ${MAX_CAP}`).min(0).max(MAX_CAP),
    /** Slots of `max` kept for higher priorities (priority.ts): a send sees max less those above its own. */
    reserve: reserveSchema.optional(),
  })
  .superRefine((cap, ctx) => {
    // a calendar cap of 0 would say "never" once a period: a rolling cap of 0 says it plainly
    if (isCalendarWindow(cap.window) && cap.max < 1)
      ctx.addIssue({
        code: "custom",
        path: ["max"],
        message: `expected at least 1 for a calendar window ("${cap.window}"); a cap of 0 takes a duration`,
      });
    // a reserve with a problem of its own reaches here untransformed: its issues are reported already
    if (!Array.isArray(cap.reserve)) return;
    const slots = reservedInAll(cap.reserve);
    // every priority keeps at least one slot: a reserve of the whole max would cap promotional sends at 0
    if (slots >= cap.max)
      ctx.addIssue({
        code: "custom",
        path: ["reserve"],
        message: `${slots} slots reserved in all, expected fewer than max (${cap.max})`,
      });
  });

const capsSchema = z.record(z.string(), z.array(capSchema).max(MAX_CAPS_PER_CHANNEL));

const objectKey = z
  .string()
  .min(1)
  .max(1024)
  .refine((key) => !key.startsWith("/") && !key.split("/").includes(".."), "expected a relative object key")
  // containers keep their copies of accepted bitmaps there (rules-source.ts)
  .refine((key) => !key.startsWith("accepted/"), "expected a key outside accepted/ (where containers keep copies)");

const segmentSchema = z.strictObject({
  name: name("segment"),
  bitmap: objectKey,
  caps: capsSchema,
  /** The segment's own quiet hours, on top of the policy-wide ones. */
  quietHours: quietHoursSchema.optional(),
});

/** Zones with a published bitmap (`zones/<zone>.roaring`) at most: one intersection each per batch. */
export const MAX_ZONES = 512;
/** Users in no zone bitmap live here unless the policy names another `defaultZone`. */
export const DEFAULT_ZONE = "UTC";
/** Where the bitmap of the users who live in `zone` is published, beside the segments. */
export const zoneBitmapKey = (zone: string) => `zones/${zone}.roaring`;

export const policySchema = z
  .strictObject({
    version: z.string().min(1).max(64),
    channels: z.array(name("channel")).min(1).max(MAX_CHANNELS),
    segments: z.array(segmentSchema).max(64),
    default: z.strictObject({ name: name("segment"), caps: capsSchema, quietHours: quietHoursSchema.optional() }),
    /** The zone of every user in no published zone bitmap (default UTC). */
    defaultZone: zoneSchema.optional(),
    /** The first day of a calendar `"week"` window (default monday, ISO 8601). */
    weekStarts: weekStartSchema.optional(),
    /** The zones whose bitmaps are published (`zones/<zone>.roaring`); a user is in at most one. */
    zones: z.array(zoneSchema).max(MAX_ZONES).optional(),
    /** Quiet hours for every segment, by channel ("*": every channel), in each user's zone. */
    quietHours: quietHoursSchema.optional(),
    /** Quotas mode rules (docs/quotas.md); optional, so policies written before it stay valid. */
    quotas: quotaRulesSchema.optional(),
    /** Who may call the check API and the quota sync route, and for what (docs/tenants.md); none: nobody. */
    tenants: tenantsSchema.optional(),
    /**
     * What a lost store (FLUSHALL, a node replaced empty) stops: `pause` (the default) counts nothing and
     * retries campaign records, answering 503 `store_lost`, until `tollgate store acknowledge`; `continue`
     * counts on against the empty state (docs/OPERATIONS.md).
     */
    onStoreLoss: z
      .enum(STORE_LOSS_POLICIES, { error: 'expected "pause" or "continue"' })
      .default(DEFAULT_ON_STORE_LOSS),
  })
  .superRefine((policy, ctx) => {
    const seenChannels = new Set<string>();
    policy.channels.forEach((channel, i) => {
      if (seenChannels.has(channel))
        ctx.addIssue({ code: "custom", path: ["channels", i], message: `duplicate channel "${channel}"` });
      seenChannels.add(channel);
    });
    const checkCaps = (caps: Record<string, unknown[]>, path: (string | number)[]) => {
      for (const channel of Object.keys(caps)) {
        if (channel !== ALL_CHANNELS && !seenChannels.has(channel)) {
          ctx.addIssue({
            code: "custom",
            path: [...path, channel],
            message: `unknown channel "${channel}" (not in channels)`,
          });
        }
      }
      for (const channel of policy.channels) {
        const count = (caps[channel]?.length ?? 0) + (caps[ALL_CHANNELS]?.length ?? 0);
        if (count > MAX_CAPS_PER_CHANNEL) {
          ctx.addIssue({
            code: "custom",
            path,
            message: `more than ${MAX_CAPS_PER_CHANNEL} caps apply to channel "${channel}"`,
          });
        }
      }
    };
    const segmentNames = new Set<string>();
    const bitmaps = new Set<string>();
    policy.segments.forEach((segment, i) => {
      if (segmentNames.has(segment.name))
        ctx.addIssue({ code: "custom", path: ["segments", i, "name"], message: `duplicate segment "${segment.name}"` });
      if (bitmaps.has(segment.bitmap))
        ctx.addIssue({
          code: "custom",
          path: ["segments", i, "bitmap"],
          message: `bitmap "${segment.bitmap}" is used by another segment`,
        });
      segmentNames.add(segment.name);
      bitmaps.add(segment.bitmap);
      checkCaps(segment.caps, ["segments", i, "caps"]);
    });
    if (segmentNames.has(policy.default.name))
      ctx.addIssue({
        code: "custom",
        path: ["default", "name"],
        message: `"${policy.default.name}" is also a segment name`,
      });
    checkCaps(policy.default.caps, ["default", "caps"]);
    const seenZones = new Set<string>();
    policy.zones?.forEach((zone, i) => {
      if (seenZones.has(zone))
        ctx.addIssue({ code: "custom", path: ["zones", i], message: `duplicate zone "${zone}"` });
      seenZones.add(zone);
    });
    const checkQuiet = (quiet: QuietHoursDocument | undefined, path: (string | number)[]) => {
      for (const channel of Object.keys(quiet ?? {})) {
        if (channel !== ALL_CHANNELS && !seenChannels.has(channel))
          ctx.addIssue({
            code: "custom",
            path: [...path, channel],
            message: `unknown channel "${channel}" (not in channels)`,
          });
      }
    };
    checkQuiet(policy.quietHours, ["quietHours"]);
    const withDefault = [...policy.segments, policy.default];
    withDefault.forEach((segment, i) => {
      const path = i < policy.segments.length ? ["segments", i, "quietHours"] : ["default", "quietHours"];
      checkQuiet(segment.quietHours, path);
      for (const channel of policy.channels) {
        const windows = quietWindowsOf(policy.quietHours, segment.quietHours, channel);
        if (windows.length > 0 && longestFreeMinutes(windows) < MIN_FREE_MINUTES)
          ctx.addIssue({
            code: "custom",
            path,
            message: `quiet hours of channel "${channel}" leave no ${MIN_FREE_MINUTES / 60} free hours in a row in a week`,
          });
      }
    });
    const rules = new Set((policy.quotas ?? []).map((rule) => rule.name));
    policy.tenants?.forEach((tenant, i) => {
      tenant.quotaRules?.forEach((rule, j) => {
        if (!rules.has(rule))
          ctx.addIssue({
            code: "custom",
            path: ["tenants", i, "quotaRules", j],
            message: `unknown quota rule "${rule}" (not in quotas)`,
          });
      });
    });
  });

export type PolicyDocument = z.output<typeof policySchema>;
type QuietHoursDocument = z.output<typeof quietHoursSchema>;

/** The windows that apply on `channel`: policy-wide and the segment's own, the channel's and "*" (all of them). */
function quietWindowsOf(
  policyWide: QuietHoursDocument | undefined,
  own: QuietHoursDocument | undefined,
  channel: string,
): QuietWindow[] {
  return compileWindows(
    [policyWide, own].flatMap((quiet) => [...(quiet?.[channel] ?? []), ...(quiet?.[ALL_CHANNELS] ?? [])]),
  );
}

export interface CapRule {
  /** The channel the cap counts, or "*" for every channel. */
  channel: string;
  window: string;
  /** A rolling window's length; a calendar window's longest period (CALENDAR_MAX_MS), which retention keeps. */
  windowMs: number;
  /** A calendar window of the user's zone ("day", "week", "month"); absent: rolling. */
  calendar?: CalendarWindow;
  max: number;
  /** Slots of max kept for higher priorities, by ascending priority (absent: none; reservedAbove()). */
  reserve?: readonly Reserve[];
}

export interface Segment {
  name: string;
  /** Object key of the segment's bitmap; undefined for the default segment. */
  bitmap?: string;
}

export interface Policy {
  version: string;
  channels: readonly string[];
  /** The listed segments in order, then the default segment last. */
  segments: readonly Segment[];
  /** Index of the default segment in `segments`. */
  defaultSegment: number;
  /** How far behind the clock `at` may be: the policy's longest window (30 days without caps). */
  backfillMs: number;
  /**
   * How long a user of the segment needs a send for its windows, measured from the clock: the deepest
   * backfill, plus the segment's longest window (a window that contains a backfilled send reaches that far
   * back), plus the future bound (clock skew). Older sends can never be in a window a valid `at` is decided
   * in. Named sends are kept longer when idempotency needs it (keptMs()).
   */
  retentionMs(segment: number): number;
  /** The longest window retention of any segment. */
  horizonMs: number;
  /** The caps that apply to a send on `channel` by a user of segment `segment`: the channel's own, then "*". */
  capsFor(segment: number, channel: string): readonly CapRule[];
  /** The zone of users in no zone bitmap. */
  defaultZone: string;
  /** The zones with a published bitmap, in policy order (zoneBitmapKey()). */
  zones: readonly string[];
  /** The quiet windows for a send on `channel` by a user of segment `segment` (empty: never quiet). */
  quietFor(segment: number, channel: string): readonly QuietWindow[];
  /** Whether any segment has quiet hours on `channel` (without, a batch's zones are not resolved). */
  hasQuietHours(channel: string): boolean;
  /** Whether any cap that applies on `channel` is a calendar window (then a batch's zones are resolved). */
  hasCalendarCaps(channel: string): boolean;
  /** The first day of a calendar week. */
  weekStarts: WeekStart;
  /** Whether any cap that applies on `channel` reserves room (without, a batch's priority changes nothing). */
  hasReserves(channel: string): boolean;
  /** Quotas mode rules by name (empty without a `quotas` section). */
  quotas: ReadonlyMap<string, PublishedQuotaRule>;
  /** The tenants, by principal (none without a `tenants` section: every request is refused). */
  tenancy: Tenancy;
  /** What follows a lost store's slot (docs/OPERATIONS.md); `pause` unless the policy says `continue`. */
  onStoreLoss: OnStoreLoss;
}

export interface PolicyParseOptions {
  /**
   * The deployment's KEY_NAMESPACE: each tenant's namespace must fit beside it in a key's namespace (the
   * functions pass theirs; without it, only the tenant namespace's own rule is checked).
   */
  keyNamespace?: string;
}

/** Validates a parsed JSON document; throws InvalidPolicyError listing every problem by field. */
export function parsePolicy(document: unknown, options: PolicyParseOptions = {}): Policy {
  const result = policySchema.safeParse(document);
  if (!result.success) {
    throw new InvalidPolicyError(
      describeIssues(result.error).map(({ path, message }) => (path ? `${path}: ${message}` : message)),
    );
  }
  const { keyNamespace } = options;
  if (keyNamespace !== undefined) {
    // refused here, by field, rather than a 500 from the key builder at the tenant's first request
    const issues = (result.data.tenants ?? []).flatMap((tenant, i) => {
      const problem = tenantNamespaceProblem(keyNamespace, tenant.namespace);
      return problem ? [`tenants[${i}].namespace: ${problem}`] : [];
    });
    if (issues.length > 0) throw new InvalidPolicyError(issues);
  }
  return compilePolicy(result.data);
}

/** Parses the text of a policy file; a JSON syntax error is an InvalidPolicyError too. */
export function parsePolicyText(text: string, options: PolicyParseOptions = {}): Policy {
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch (error) {
    throw new InvalidPolicyError([`not valid JSON: ${(error as Error).message}`]);
  }
  return parsePolicy(document, options);
}

function compilePolicy(document: PolicyDocument): Policy {
  const all = [...document.segments, { ...document.default, bitmap: undefined }];
  let longestMs = 0;
  const longestBySegment = all.map(() => 0);
  const table = all.map((segment, index) => {
    const rules = (channel: string): CapRule[] =>
      (segment.caps[channel] ?? []).map((cap) => {
        const calendar = isCalendarWindow(cap.window) ? cap.window : undefined;
        const windowMs = calendar ? CALENDAR_MAX_MS[calendar] : (parseDuration(cap.window) as number);
        longestMs = Math.max(longestMs, windowMs);
        longestBySegment[index] = Math.max(longestBySegment[index] as number, windowMs);
        const rule: CapRule = { channel, window: cap.window, windowMs, max: cap.max };
        if (calendar) rule.calendar = calendar;
        if (cap.reserve) rule.reserve = cap.reserve;
        return rule;
      });
    const shared = rules(ALL_CHANNELS);
    return new Map(document.channels.map((channel) => [channel, [...rules(channel), ...shared]]));
  });
  const quiet = all.map(
    (segment) =>
      new Map(
        document.channels.map((channel) => [channel, quietWindowsOf(document.quietHours, segment.quietHours, channel)]),
      ),
  );
  const quietChannels = new Set(
    document.channels.filter((channel) => quiet.some((byChannel) => (byChannel.get(channel)?.length ?? 0) > 0)),
  );
  const reserveChannels = new Set(
    document.channels.filter((channel) =>
      table.some((byChannel) => byChannel.get(channel)?.some((cap) => cap.reserve !== undefined)),
    ),
  );
  const calendarChannels = new Set(
    document.channels.filter((channel) =>
      table.some((byChannel) => byChannel.get(channel)?.some((cap) => cap.calendar !== undefined)),
    ),
  );
  const backfillMs = longestMs > 0 ? longestMs : DEFAULT_BACKFILL_MS;
  const retention = longestBySegment.map((segmentMs) => backfillMs + segmentMs + MAX_FUTURE_MS);
  return {
    version: document.version,
    channels: document.channels,
    segments: all.map(({ name, bitmap }) => (bitmap === undefined ? { name } : { name, bitmap })),
    defaultZone: document.defaultZone ?? DEFAULT_ZONE,
    zones: document.zones ?? [],
    quietFor: (segment, channel) => quiet[segment]?.get(channel) ?? [],
    hasQuietHours: (channel) => quietChannels.has(channel),
    hasReserves: (channel) => reserveChannels.has(channel),
    hasCalendarCaps: (channel) => calendarChannels.has(channel),
    weekStarts: document.weekStarts ?? DEFAULT_WEEK_START,
    defaultSegment: all.length - 1,
    backfillMs,
    retentionMs: (segment) => retention[segment] as number,
    horizonMs: Math.max(...retention),
    capsFor(segment, channel) {
      return table[segment]?.get(channel) ?? [];
    },
    quotas: compileQuotaRules(document.version, document.quotas ?? []),
    tenancy: new Tenancy(document.tenants ?? []),
    onStoreLoss: document.onStoreLoss,
  };
}

/**
 * How long a send is kept to recognise its redelivery, measured from the clock like every retention: a
 * send counted at `now` has `at` no older than the backfill bound, its message can come back for
 * `redeliveryMs`, and the consumer that receives it may read a clock up to the future bound ahead.
 */
export function idempotencyMs(policy: Pick<Policy, "backfillMs">, redeliveryMs: number): number {
  return policy.backfillMs + redeliveryMs + MAX_FUTURE_MS;
}

/** How long a user of `segment` keeps a send it was counted with: for its windows, and for idempotency. */
export function keptMs(policy: Policy, segment: number, redeliveryMs: number): number {
  return Math.max(policy.retentionMs(segment), idempotencyMs(policy, redeliveryMs));
}

/** The longest time any user keeps a send (block compaction keeps that much). */
export function keptHorizonMs(policy: Policy, redeliveryMs: number): number {
  return Math.max(policy.horizonMs, idempotencyMs(policy, redeliveryMs));
}
