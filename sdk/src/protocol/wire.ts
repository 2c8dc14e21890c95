// The Quotas sync protocol: one call reports an instance's usage for the keys of one slot group and
// brings back their allowances. Shared by the SDK (direct to Redis) and the check API (POST /v1/quotas/sync).
//
// CONTRACT (protocol 2). Everything below is the whole protocol; lua/quota-sync/ implements it.
//
// Slot group. A rule's keys are spread over `rule.slotGroups` groups (default 1) by FNV-1a of the key;
//   every Redis key of a group shares the hash tag `{<rule>.<group>}`, so one call (one slot) covers any
//   number of keys of that group. The keys (cfg, seq, inst, and k:<key> per quota key) are built in
//   keys.ts, with every other Tollgate key.
// Sequence. `seq` counts from 1 per (instance, slot group); a retry resends the same seq with the same
//   entries. A seq already applied answers `duplicate` (nothing counted, no tokens granted); a seq more
//   than 32 below the highest applied answers `stale` (nothing counted). Instance ids are random per
//   process and never reused: the seq record lives max(longest window, 60 s) + 60 s after the last sync.
// Time. `now` (ms since the epoch) is the caller's clock (the check API's for HTTP, the instance's for
//   direct calls), held by the store: never ahead of the store's clock (a caller ahead counts as the
//   store's time), moving on per instance as its own clock moved since its previous applied sync (never
//   back: a clock stepped back goes on from the time it had), never behind the slot group's latest time.
//   The call's time is what every grant and spend is stamped with; `serverTime` is it. A client converts
//   an expiry to its own clock from the moment it SENT the request (sentAt + (expiry - serverTime)), which
//   is never later than the true expiry, whatever the offset between the two clocks.
// Usage (approximate mode): `usage` = [at, count] per epoch (at: ms on the caller's clock, counted at the
//   same age on the call's time and never after it; epochs older than the longest window are dropped). Strict mode: `usage` = [grantedAt, count] per grant, the tokens of
//   that grant spent since the last report (all spent before this request was sent); a grant may appear
//   in several pairs. `spentAgo` (strict, optional, one per usage pair): those tokens were all spent at
//   least this many ms before the request was sent (measured on the instance's monotonic clock), so the
//   store counts them from (now - spentAgo) over W rather than from now: an upper bound of the spend time
//   on the store's clock, since the store reads `now` after the request was sent (a resent request only
//   dates them later). Absent (older clients, Lambda): 0 for every pair, counted from now.
// Demand: `offered` = requests the instance saw for the key since its previous sync (admitted and
//   denied). The server keeps the key's and the instance's offered counts decaying over 1 s; a share is
//   the instance's part of that recent demand (plus a small even pseudo-demand, so an idle instance
//   still gets something).
// Retries. A sync whose reply never came is retried with the same seq and entries until it is
//   answered. An instance that gives up on one may send its approximate usage again under a new seq
//   (counting it twice only over-counts), but must drop its refunds and strict spent tokens (taking them
//   off their grant twice could over-admit).
// approximate: `allowance` = how many requests the instance may admit from the moment it SENT this
//   request until the next reply replaces it (subtract what it admitted since sending). 0 with
//   `denyUntil` > now: exhausted, deny locally until then. The store reserves the allowance (counts it
//   in the windows) until the instance's next applied sync for the key, whose usage is what it covered:
//   then the reservation goes back and the usage counts, from the grant (or, reported more than 100 ms
//   after it, from 100 ms before the report). A duplicate answers the same allowance. Past
//   `validUntil` an instance keeps at most the fallback of what is left, never a fresh share. `want` = the
//   cost of requests waiting for this reply: the allowance is at least min(want, what is left).
// strict: `tokens` are reserved for the instance until `leaseExpiresAt` (added to what it holds).
//   Tokens left at expiry go back as `refunds` = [grantedAt, count] (grantedAt = that reply's
//   serverTime). `want` = tokens asked for. Windows count grants over W + lease and tokens reported spent
//   over W from the report, so no window of W ever holds more than `max` used tokens, whatever the
//   instances do with timing (the store counts spent tokens 10 ms longer, its margin for `spentAgo`). `denyUntil` > now: nothing is left to grant before then (the next bucket boundary:
//   strict's spent tokens' buckets are W/100); use what you hold and ask for no tokens until then.
// Size. A request's JSON body is at most MAX_SYNC_BODY_BYTES and MAX_KEYS_PER_SYNC entries; a client with
//   more to say sends the rest of a group's keys in its next requests.
// Config. The reply carries the rule's `configVersion`; when it differs from the version the request
//   saw, the reply also carries the rule itself, so an operator's change reaches a client in one sync.
//   `status: "norule"`: the rule is not configured (in this group); nothing was counted. For a rule the
//   client had, the rule was removed or lost with the store's state: it grants nothing from a fallback
//   share (nobody counts it) until the store answers for the rule again. A rule restored after a loss
//   grants nothing new (denyUntil = the end of that quiet time) for one window plus the lease.
//
// Redis call: EVALSHA quota-sync KEYS = [cfg, seq, inst, k(key_1) .. k(key_n)]
//   ARGV = [protocol, now, instanceId, seq, configVersionSeen,
//           then per key one packed entry: little-endian doubles offered, want, usage.length,
//           refunds.length, then usage's [at, count] pairs and refunds', then (strict, optional: the
//           entry is longer by 8 bytes per usage pair) each usage pair's spentAgo (packEntry)]
//   Reply = [protocol, status, serverTime, configVersion, rule ("" when unchanged), mode, windows,
//            instances, then per key: amount, expiresAt, denyUntil, resetAt, used_1 .. used_windows]
//   (amount: allowance or tokens by mode; expiresAt: validUntil or leaseExpiresAt.)
// No package dependencies (Node's Buffer only); published in @tollgate/quotas/protocol.
import { WireError } from "./errors.ts";
import { checkName, quotaKey, slotGroupKeys, slotGroupPrefix } from "./keys.ts";

/** 2: each key's numbers travel packed (little-endian doubles), not as "at:count" text (protocol 1). */
export const PROTOCOL = 2;
export const MAX_KEYS_PER_SYNC = 256;
/**
 * A sync request's JSON body (UTF-8) is at most this long: the HTTP route answers 413 above it. 256 keys
 * of 256 characters alone would fill it, so a client sends a group's keys over consecutive requests.
 */
export const MAX_SYNC_BODY_BYTES = 64 * 1024;
export const MAX_EPOCHS_PER_KEY = 64;
/** A sequence more than this far below the highest applied one is refused as stale. */
export const REORDER_WINDOW = 32;

export type QuotaMode = "strict" | "approximate";
/** What an instance does when it holds no valid allowance (SDK side; the server only carries it). */
export type QuotaFallback = "share" | "allow" | "deny";

export interface QuotaLimit {
  /** Window length in ms: whole seconds, 1 s .. 1 day. */
  windowMs: number;
  /** At most this many requests in any window of that length. */
  max: number;
}

export interface QuotaRule {
  mode: QuotaMode;
  limits: QuotaLimit[];
  /** strict: how long granted tokens stay usable. approximate: how long an allowance stays valid. */
  leaseMs: number;
  fallback: QuotaFallback;
  slotGroups: number;
}

export interface SyncEntry {
  key: string;
  /** [at ms, count] per epoch; approximate mode only. */
  usage: Array<[number, number]>;
  /** [grantedAt ms, count] of expired, unused tokens; strict mode only. */
  refunds: Array<[number, number]>;
  offered: number;
  /**
   * strict: tokens asked for; approximate: the cost of requests waiting for this reply (`decide`), granted
   * from what is left whatever the instance's share (0: none waiting).
   */
  want: number;
  /**
   * strict, optional: per usage pair, ms before this request was sent by which those tokens were all spent
   * (absent: 0 each, today's counting from the report).
   */
  spentAgo?: number[];
}

/** One sync call: the JSON body of POST /v1/quotas/sync, and what encodeSync turns into KEYS/ARGV. */
export interface SyncRequest {
  instanceId: string;
  rule: string;
  group: number;
  seq: number;
  /** The rule's config version this instance holds ("" before it knows one). */
  configVersion: string;
  entries: SyncEntry[];
}

export type SyncStatus = "applied" | "duplicate" | "stale" | "norule";

interface AssignmentBase {
  key: string;
  /** Until then the key is exhausted (approximate: deny locally; strict: spend only tokens held). 0: not exhausted. */
  denyUntil: number;
  /** When everything counted now has left the tightest window. */
  resetAt: number;
  /** Per limit, in the rule's order: what the window holds now (strict: tokens granted and not reported spent, and spent ones; approximate: usage and reserved allowances). */
  used: number[];
}
export interface ApproximateAssignment extends AssignmentBase {
  mode: "approximate";
  allowance: number;
  validUntil: number;
}
export interface StrictAssignment extends AssignmentBase {
  mode: "strict";
  tokens: number;
  leaseExpiresAt: number;
}
export type Assignment = ApproximateAssignment | StrictAssignment;

/** The reply of one sync call (also the JSON body answered by POST /v1/quotas/sync). */
export interface SyncReply {
  status: SyncStatus;
  serverTime: number;
  configVersion: string;
  /** Present when configVersion differs from the one the request saw. */
  rule?: QuotaRule;
  /** Instances that synced this slot group in the last 5 s (for the degraded safe share). */
  instances: number;
  entries: Assignment[];
}

/** The rule as stored in the cfg key and sent in replies: `mode|leaseMs|fallback|slotGroups|W:max,W:max`. */
export function encodeRule(rule: QuotaRule): string {
  const limits = rule.limits.map((limit) => `${limit.windowMs}:${limit.max}`).join(",");
  return `${rule.mode}|${rule.leaseMs}|${rule.fallback}|${rule.slotGroups}|${limits}`;
}

export function decodeRule(text: string): QuotaRule {
  const [mode, leaseMs, fallback, slotGroups, limits, extra] = text.split("|");
  if (mode !== "strict" && mode !== "approximate") throw new WireError("rule.mode", `unknown mode ${mode}`);
  if (fallback !== "share" && fallback !== "allow" && fallback !== "deny") {
    throw new WireError("rule.fallback", `unknown fallback ${fallback}`);
  }
  if (limits === undefined || limits === "" || extra !== undefined) throw new WireError("rule", "malformed");
  return {
    mode,
    leaseMs: integer("rule.leaseMs", leaseMs),
    fallback,
    slotGroups: integer("rule.slotGroups", slotGroups),
    limits: limits.split(",").map((pair, i) => {
      const [windowMs, max] = pair.split(":");
      return { windowMs: integer(`rule.limits[${i}].windowMs`, windowMs), max: integer(`rule.limits[${i}].max`, max) };
    }),
  };
}

function integer(field: string, value: unknown): number {
  const n = typeof value === "string" && value !== "" ? Number(value) : value;
  if (typeof n !== "number" || !Number.isSafeInteger(n))
    throw new WireError(field, `expected an integer, got ${value}`);
  return n;
}

/** A count or time the script can hold exactly: a double's integers, never negative. */
function wholeNumber(field: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 0) throw new WireError(field, `expected an integer >= 0, got ${value}`);
  return value;
}

/**
 * One key's numbers as the script reads them (one struct.unpack, no text to parse): little-endian doubles
 * offered, want, usage.length, refunds.length, then usage's and refunds' [at, count] pairs. `i` names the
 * entry in errors.
 */
export function packEntry(entry: SyncEntry, i: number): Buffer {
  if (entry.usage.length > MAX_EPOCHS_PER_KEY || entry.refunds.length > MAX_EPOCHS_PER_KEY) {
    throw new WireError(`entries[${i}].usage`, `at most ${MAX_EPOCHS_PER_KEY} epochs per key`);
  }
  const ago = entry.spentAgo;
  if (ago !== undefined && ago.length !== entry.usage.length) {
    throw new WireError(
      `entries[${i}].spentAgo`,
      `expected one per usage pair (${entry.usage.length}), got ${ago.length}`,
    );
  }
  // a Buffer (ioredis sends a Buffer argument as its bytes; any other object as its text); the ages, when
  // some are not 0, after the refunds (an entry of today's length reads as all 0)
  const stamped = ago?.some((a) => a !== 0) ?? false;
  const pairs = entry.usage.length + entry.refunds.length;
  const bytes = Buffer.allocUnsafe(32 + 16 * pairs + (stamped ? 8 * entry.usage.length : 0));
  bytes.writeDoubleLE(wholeNumber(`entries[${i}].offered`, entry.offered), 0);
  bytes.writeDoubleLE(wholeNumber(`entries[${i}].want`, entry.want), 8);
  bytes.writeDoubleLE(entry.usage.length, 16);
  bytes.writeDoubleLE(entry.refunds.length, 24);
  let at = 32;
  for (const [name, list] of [
    ["usage", entry.usage],
    ["refunds", entry.refunds],
  ] as const) {
    list.forEach(([time, count], j) => {
      bytes.writeDoubleLE(wholeNumber(`entries[${i}].${name}[${j}][0]`, time), at);
      bytes.writeDoubleLE(wholeNumber(`entries[${i}].${name}[${j}][1]`, count), at + 8);
      at += 16;
    });
  }
  if (stamped && ago) {
    ago.forEach((ms, j) => {
      bytes.writeDoubleLE(wholeNumber(`entries[${i}].spentAgo[${j}]`, ms), at);
      at += 8;
    });
  }
  return bytes;
}

/** KEYS and ARGV of one quota-sync call. `now` is the caller's clock (ms). */
export function encodeSync(
  namespace: string,
  request: SyncRequest,
  now: number,
  options: { read?: boolean } = {},
): { keys: string[]; args: Array<string | number | Buffer> } {
  // a read (`options.read`, the operator's `quotas usage`) goes out as instance "", which no client can be:
  // the script then applies, grants and writes nothing, and does not count the reader as an instance
  if (!options.read) checkName("instanceId", request.instanceId);
  // no entries: a request for the rule's definition alone (`quotas.ready()` before any key is checked)
  if (request.entries.length > MAX_KEYS_PER_SYNC) {
    throw new WireError("entries", `expected at most ${MAX_KEYS_PER_SYNC} entries`);
  }
  const group = slotGroupKeys(namespace, request.rule, request.group);
  const prefix = slotGroupPrefix(namespace, request.rule, request.group);
  const keys = [group.config, group.sequences, group.instances];
  const args: Array<string | number | Buffer> = options.read
    ? [PROTOCOL, now, "", 0, request.configVersion]
    : [PROTOCOL, now, request.instanceId, request.seq, request.configVersion];
  request.entries.forEach((entry, i) => {
    keys.push(quotaKey(prefix, entry.key));
    args.push(packEntry(entry, i));
  });
  return { keys, args };
}

const STATUSES: readonly SyncStatus[] = ["applied", "duplicate", "stale", "norule"];
const HEADER = 8;

/** The typed reply of a quota-sync call; `request` is the one it answers (for the keys). */
export function decodeSync(reply: unknown, request: SyncRequest): SyncReply {
  if (!Array.isArray(reply) || reply.length < HEADER) throw new WireError("reply", "expected an array");
  const [protocol, status, serverTime, configVersion, rule, mode, windows, instances] = reply;
  if (integer("reply.protocol", protocol) !== PROTOCOL) throw new WireError("reply.protocol", `expected ${PROTOCOL}`);
  if (!STATUSES.includes(status as SyncStatus)) throw new WireError("reply.status", `unknown status ${status}`);
  const result: SyncReply = {
    status: status as SyncStatus,
    serverTime: integer("reply.serverTime", serverTime),
    configVersion: String(configVersion ?? ""),
    instances: integer("reply.instances", instances),
    entries: [],
  };
  if (typeof rule === "string" && rule !== "") result.rule = decodeRule(rule);
  if (status === "norule") return result;
  if (mode !== "strict" && mode !== "approximate") throw new WireError("reply.mode", `unknown mode ${mode}`);
  const n = integer("reply.windows", windows);
  const stride = 4 + n;
  if (reply.length !== HEADER + stride * request.entries.length) throw new WireError("reply", "wrong length");
  request.entries.forEach((entry, i) => {
    const at = HEADER + stride * i;
    const field = (j: number, name: string) => integer(`reply.entries[${i}].${name}`, reply[at + j]);
    const base = {
      key: entry.key,
      denyUntil: field(2, "denyUntil"),
      resetAt: field(3, "resetAt"),
      used: Array.from({ length: n }, (_, w) => field(4 + w, `used[${w}]`)),
    };
    result.entries.push(
      mode === "strict"
        ? { mode, tokens: field(0, "tokens"), leaseExpiresAt: field(1, "leaseExpiresAt"), ...base }
        : { mode, allowance: field(0, "allowance"), validUntil: field(1, "validUntil"), ...base },
    );
  });
  return result;
}
