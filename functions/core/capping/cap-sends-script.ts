// The wire protocol of cap-sends (the header of its entry, lua/cap-sends/cap-sends.lua, is the contract): how
// a batch is split into script calls (keys and arguments, one slot each), how many run at once, and what the
// reply bytes and the "+windows" lines mean. The Capper never sees an argument position, a profile byte or a
// reply code.
import { encode } from "@msgpack/msgpack";
import {
  capIdentityKey,
  capKeyPrefix,
  capTagOf,
  pageOf,
  recordRangeOf,
  USERS_PER_PAGE,
} from "../../../sdk/src/protocol/index.ts";
import { PartlyDecidedError } from "../shared/errors.ts";
import type { CalendarWindow } from "./calendar-windows.ts";
import type { DecisionKind } from "./decisions.ts";
import { keptMs, MAX_CAPS_PER_CHANNEL, type Policy } from "./policy.ts";
import { DEFAULT_PRIORITY, reservedAbove } from "./priority.ts";

/** What the capper needs from the counter store: run cap-sends with the keys and arguments planned here. */
export interface CapStore {
  capSends(keys: readonly string[], args: readonly (string | Buffer)[]): Promise<Buffer>;
  /**
   * Of the calls' keys, those whose hash slot is known to have lost its state and still has (onStoreLoss
   * `pause`), each with the error its call would fail with: a batch fails on them before any of its calls
   * counts. Optional: a store without a store epoch has none.
   */
  stillLost?(keys: readonly string[]): Promise<Map<string, unknown>>;
}

export const REPLY_ALLOWED = 0;
export const REPLY_DUPLICATE = 1;
export const REPLY_EXEMPT = 2;
/** 3 + i: capped by cap i of the user's profile. */
export const REPLY_FIRST_CAP = 3;
/** 35 + i: displaced by cap i's reserve (room the caps keep for higher priorities; lua/cap-sends/reserve.lua). */
export const REPLY_FIRST_DISPLACED = REPLY_FIRST_CAP + MAX_CAPS_PER_CHANNEL;

/**
 * What POST /v1/frequency reports of one user, as cap-sends worked it out from the user's sends
 * after the call ("+windows"; windowsLine() in lua/cap-sends/windows-report.lua states the rule).
 */
export interface UserWindows {
  /** Per cap of the user's profile, in order: the sends of its fullest window around `at`, and when that
   * window's oldest send ages out (`at` when it holds none). */
  caps: { used: number; resetAt: number }[];
  /** When capped: the earliest time after `at` at which the same check is allowed (absent: never, or not capped). */
  retryAt?: number;
}

/**
 * Each sorted user's verdict as the script replied (a repeated ID takes the reply of its first
 * occurrence: read it through the capper's repeat rule).
 */
export class Verdicts {
  private constructor(private readonly codes: Uint8Array) {}

  /** Every user exempt, without a script call (exempt sends that do not count). */
  static allExempt(users: number): Verdicts {
    return new Verdicts(new Uint8Array(users).fill(REPLY_EXEMPT));
  }

  /** For the script's replies only. */
  static of(codes: Uint8Array): Verdicts {
    return new Verdicts(codes);
  }

  decision(user: number): DecisionKind {
    const code = this.codes[user] as number;
    if (code === REPLY_ALLOWED) return "allowed";
    if (code === REPLY_DUPLICATE) return "duplicate";
    if (code === REPLY_EXEMPT) return "exempt";
    return code >= REPLY_FIRST_DISPLACED ? "displaced" : "capped";
  }

  /** For a capped or displaced user: which cap denied it, as an index into `policy.capsFor(segment, channel)`. */
  capIndex(user: number): number {
    const code = this.codes[user] as number;
    return code - (code >= REPLY_FIRST_DISPLACED ? REPLY_FIRST_DISPLACED : REPLY_FIRST_CAP);
  }
}

/**
 * A page with at least this many users in one call is written through its block (shared histories);
 * fewer go to user records, so a single-user call never rewrites a page of 256 users.
 */
export const BLOCK_PATH_MIN_USERS = 16;
/** Byte 2 of an argument holding a range's users (cap-sends.lua's header; a page argument's is its path, 0 or 1). */
const RANGE_USERS = 2;
/** The profile byte of a held user in a page argument (cap-sends.lua's header): no send, its history kept. */
export const HELD_PROFILE = 255;
/**
 * Keys one call reads and writes whatever their content, at most: the identity table, the record hashes and
 * the blocks of block-path pages (each block read, unpacked and written costs ~35 µs). A record-path page
 * costs a marker lookup and reads a block only where one exists, so it is bounded by the users (below).
 * The script declares only the identity table (KEYS[1]) and builds the other keys' names itself.
 */
export const MAX_KEYS_PER_CALL = 64;
/** Users of one call at most: bounds one script's run time. */
export const MAX_USERS_PER_CALL = 1024;
/**
 * A "+windows" call's users × the most caps of its profiles at most: a capped user's windows and retry time
 * cost per cap (and per candidate instant of every cap), so such calls are bounded by caps, not users alone.
 */
export const MAX_WINDOW_CAPS_PER_CALL = 128;
/**
 * A call's profiles × the most caps of a profile at most: a page decides each of its profiles' histories on
 * its own, so users of many profiles (a segment's calendar caps in many zones) cost per profile (65 × 32: the
 * most segments, each with the most caps, fit one call).
 */
export const MAX_PROFILE_CAPS_PER_CALL = 2080;
/**
 * Users of block-path pages that a call holds only in part, at most per call. A page reached by a part of a
 * campaign (30 campaigns a week, each to a random half) is where histories diverge, and a diverged user
 * costs its own decision and class; a whole page (a dense campaign) mostly shares one history. So a call of
 * partial pages holds about one page's worth, where 4 whole pages share a call.
 */
export const MAX_PARTIAL_PAGE_USERS_PER_CALL = 128;
/** Script calls of one batch in flight at once: a 90,000-user sparse message never floods a shard. */
export const MAX_CALLS_IN_FLIGHT = 16;
/**
 * A range's record blob (one string of its users' records, lua/cap-sends/record-blobs.lua) splits by ID past this size:
 * a call rewrites the blobs of its users, so this bounds what one call copies (about 140 users of one shared
 * history; 100k IDs at random put about 100 in a range). A single-user check rewrites its user's part, so
 * a smaller part is a cheaper check (1 KB: 586k instructions a check, 8 KB: 745k).
 */
export const BLOB_SPLIT_BYTES = 1024;

/** One cap as the script sees it. */
export interface ScriptCap {
  /** A rolling window's length (a calendar cap's is its period's, calendar-profiles.ts). */
  windowMs: number;
  /** A calendar window: its periods come per zone (`period`, calendar-profiles.ts). */
  calendar?: CalendarWindow;
  /**
   * A calendar cap's periods in the user's zone: the start and end of the one holding `at`, then the ends of
   * the following ones until past every send the store can hold (periodBoundaries()).
   */
  period?: readonly number[];
  /** What the call's priority may fill: the cap's max less its reserve for higher priorities. */
  max: number;
  /** The cap's own max, when a reserve keeps part of it from the call's priority (absent: `max` is it). */
  fullMax?: number;
  /** Counts every channel's sends ("*"), not only the call's channel. */
  everyChannel: boolean;
}

/** A segment's caps for the call's channel, and how long its users' sends are kept. */
export interface ScriptProfile {
  caps: readonly ScriptCap[];
  /** Every send is dropped at this age: the longer of what windows and idempotency need (keptMs()). */
  retentionMs: number;
  /** What the windows need (policy.retentionMs()): older named sends stay for idempotency only. */
  windowRetentionMs: number;
}

/**
 * Every segment's caps on `channel` and its retentions, as the script takes them (one per segment number),
 * for sends of `priority` (priority.ts); `redeliveryMs`: how long a counted send's message can come back
 * (policy.ts DEFAULT_REDELIVERY_MS).
 */
export function scriptProfiles(
  policy: Policy,
  channel: string,
  redeliveryMs: number,
  priority = DEFAULT_PRIORITY,
): ScriptProfile[] {
  return policy.segments.map((_, segment) => ({
    caps: policy.capsFor(segment, channel).map((cap): ScriptCap => {
      const room = cap.max - reservedAbove(cap.reserve, priority);
      const scriptCap: ScriptCap = { windowMs: cap.windowMs, max: room, everyChannel: cap.channel !== channel };
      if (cap.calendar) scriptCap.calendar = cap.calendar;
      if (room < cap.max) scriptCap.fullMax = cap.max;
      return scriptCap;
    }),
    retentionMs: keptMs(policy, segment, redeliveryMs),
    windowRetentionMs: policy.retentionMs(segment),
  }));
}

export interface CapSendsRequest {
  namespace: string;
  /** The caller's clock: retention and TTLs are measured from it. */
  now: number;
  /** The send time decided. */
  at: number;
  mode: "count" | "peek";
  /** Also return each user's windows (for one-user reports). */
  withWindows?: boolean;
  /**
   * A record reaching 1,024 sends may be written as a hot user's record (format 3, docs/decisions/0095): only
   * once no function of a release before it runs, since those misread it.
   */
  hotRecords?: boolean;
  /**
   * Page blocks may be written with their class numbers at the narrowest width (format 6, docs/decisions/0195):
   * only once no function of a release before it runs, since those refuse such blocks.
   */
  compactClasses?: boolean;
  channel: string;
  /** Empty: anonymous, every send counts. */
  campaignId: string;
  /** Count every send without checking caps (exempt sends that count). */
  forced: boolean;
  /** The longest retention of any profile of the policy (block compaction keeps that much). */
  horizonMs: number;
  /** scriptProfiles(policy, channel): one per segment, indexed by `segmentOf`. */
  profiles: readonly ScriptProfile[];
  /** User IDs ascending (repeats allowed: each is decided once) and each one's segment, in step. */
  sortedIds: Uint32Array;
  segmentOf: Uint8Array;
  /**
   * Users of the batch that get no send (quiet hours hold them), IDs ascending, none of `sortedIds`: never
   * decided nor replied, but carried in their pages' block-path arguments (profile HELD_PROFILE), so a page
   * the batch reaches whole is still one whole page to the script and shares a call with 3 others.
   */
  held?: Uint32Array;
  /** A record blob past this many bytes splits in two (default BLOB_SPLIT_BYTES; tests make splits small). */
  blobSplitBytes?: number;
}

export interface CapSendsCall {
  keys: string[];
  args: (string | Buffer)[];
  /** Indices into sortedIds, in the order of the reply's bytes. */
  members: number[];
  /** The hash tag of every key of the call (one slot). */
  tag: number;
  /** The pages the call holds, ascending (one page argument each, or their users in their ranges' arguments). */
  pages: number[];
}

interface PageRun {
  page: number;
  range: number;
  /** Its users: indices first..last into sortedIds, repeats skipped (count: how many are left). */
  first: number;
  last: number;
  count: number;
  /** Its held users: indices heldFirst..heldFirst + heldCount - 1 into `held` (carried on the block path only). */
  heldFirst: number;
  heldCount: number;
  blockPath: boolean;
  /** The profile numbers of its users, each once. */
  profiles: number[];
}

/**
 * What the calls that answered decided when another call of the same request failed (PartlyDecidedError's
 * `decided`): `answered[j]` is 1 for each sorted user whose call answered (a repeated ID's later occurrences
 * keep 0 and follow the first), and `verdicts` holds their replies.
 */
export interface AnsweredVerdicts {
  verdicts: Verdicts;
  answered: Uint8Array;
}

/** The first failure, or PartlyDecidedError with what answered when some call did. */
function failureOf(error: unknown, codes: Uint8Array, answered: Uint8Array): unknown {
  if (!answered.includes(1)) return error;
  return new PartlyDecidedError<AnsweredVerdicts>({ verdicts: Verdicts.of(codes), answered }, error);
}

/**
 * Runs the planned calls, at most MAX_CALLS_IN_FLIGHT at once, and decodes the replies. After a failure no
 * new call starts, and every started one is awaited before the first failure is thrown (as a
 * PartlyDecidedError when some calls answered: what they counted stays counted).
 */
export async function runCapSends(
  store: CapStore,
  request: CapSendsRequest,
): Promise<{ verdicts: Verdicts; windows: Map<number, UserWindows> }> {
  const calls = planCapSends(request);
  const withWindows = request.withWindows === true;
  // a repeated ID is sent once; its later occurrences keep 0 here and follow the first (Verdicts)
  const codes = new Uint8Array(request.sortedIds.length);
  const answered = new Uint8Array(request.sortedIds.length);
  const windows = new Map<number, UserWindows>();
  // one call (a single user: POST /v1/frequency): no workers to start and gather
  if (calls.length === 1) {
    await runCall(store, calls[0] as CapSendsCall, withWindows, { codes, answered, windows });
    return { verdicts: Verdicts.of(codes), windows };
  }
  const failures = await runCalls(store, calls, withWindows, { codes, answered, windows }, () => 0);
  if (failures.length > 0) throw failureOf(failures[0]?.error, codes, answered);
  return { verdicts: Verdicts.of(codes), windows };
}

/** Where calls put their replies, by index into the request's sorted users. */
interface Replies {
  codes: Uint8Array;
  /** 1 once the member's call answered. */
  answered: Uint8Array;
  windows: Map<number, UserWindows>;
}

/** One call: each member's reply code into `codes` (and its "+windows" line into `windows`). */
async function runCall(
  store: CapStore,
  call: CapSendsCall,
  withWindows: boolean,
  { codes, answered, windows }: Replies,
): Promise<void> {
  const reply = await store.capSends(call.keys, call.args);
  const { codes: callCodes, lines } = readCapSendsReply(reply, call.members.length);
  if (lines.length !== (withWindows ? call.members.length : 0)) {
    throw new Error(`cap-sends replied ${lines.length} window lines for ${call.members.length} users`);
  }
  call.members.forEach((member, m) => {
    codes[member] = callCodes[m] as number;
    answered[member] = 1;
    if (withWindows) windows.set(member, parseWindowsLine(lines[m] as string));
  });
}

/**
 * Runs `calls`, at most MAX_CALLS_IN_FLIGHT per owner at once (runCall()). `ownerOf(member)` names who a
 * member belongs to; a failed call is returned with the owners of its members, and a call whose owners have
 * all failed is not started (one owner: no new call after a failure). Every started call is awaited.
 */
async function runCalls(
  store: CapStore,
  calls: CapSendsCall[],
  withWindows: boolean,
  replies: Replies,
  ownerOf: (member: number) => number,
  owners = 1,
): Promise<{ error: unknown; owners: Set<number> }[]> {
  const failures: { error: unknown; owners: Set<number> }[] = [];
  const failed = new Set<number>();
  // a slot known lost fails its requests before any of their calls starts: a paused message's retries count
  // nothing, where each would otherwise count (and forward) the users of the calls that ran before it failed
  const lost = store.stillLost ? await store.stillLost(calls.map((call) => call.keys[0] as string)) : undefined;
  const skipped = new Set<CapSendsCall>();
  for (const call of lost?.size ? calls : []) {
    const error = lost?.get(call.keys[0] as string);
    if (error === undefined) continue;
    const owners = new Set(call.members.map(ownerOf));
    failures.push({ error, owners });
    for (const owner of owners) failed.add(owner);
    skipped.add(call);
  }
  let next = 0;
  const worker = async () => {
    while (next < calls.length) {
      const call = calls[next++] as CapSendsCall;
      const owners = new Set(call.members.map(ownerOf));
      if (skipped.has(call) || [...owners].every((owner) => failed.has(owner))) continue;
      try {
        await runCall(store, call, withWindows, replies);
      } catch (error) {
        failures.push({ error, owners });
        for (const owner of owners) failed.add(owner);
      }
    }
  };
  // requests planned together keep the calls in flight they would have had apart: a group of four dense
  // 10,000-user batches with 16 in flight ran about a third fewer decisions/s than the batches with 16 each
  await Promise.all(Array.from({ length: Math.min(MAX_CALLS_IN_FLIGHT * owners, calls.length) }, worker));
  return failures;
}

/** Users of one coalesced group at most (a sort key holds a user's position in 20 bits). */
const MAX_COALESCED_USERS = 2 ** 19;

interface PendingRequest {
  request: CapSendsRequest;
  resolve: (result: { verdicts: Verdicts; windows: Map<number, UserWindows> }) => void;
  reject: (error: unknown) => void;
}

/**
 * Shares script calls between requests in flight together. Requests made in the same turn of the event
 * loop (an invocation deciding its records concurrently, the bench's 10 batches at once) with the same
 * call parameters (namespace, now, at, mode, identity, exempt, horizon, profiles) and no user in common
 * are planned as one: one call per tag for all their users, where each alone brings ~40 sparse users of a
 * tag. Each request keeps its own decisions and its own failures: a failed call fails only the requests
 * with users in it (their callers retry them; a send already counted comes back duplicate), and a request
 * whose users overlap another's is planned apart (an anonymous send is not idempotent, and a repeat across
 * requests would be decided once). Requests with "+windows" (single-user checks) are never held back.
 */
export class CapSendsCoalescer {
  private pending: PendingRequest[] = [];
  /** Profiles are compared by identity (the capper makes them once per policy and channel). */
  private readonly profileIds = new WeakMap<readonly ScriptProfile[], number>();
  private profileCount = 0;

  constructor(private readonly store: CapStore) {}

  run(request: CapSendsRequest): Promise<{ verdicts: Verdicts; windows: Map<number, UserWindows> }> {
    if (request.withWindows) return runCapSends(this.store, request);
    return new Promise((resolve, reject) => {
      this.pending.push({ request, resolve, reject });
      if (this.pending.length === 1) setImmediate(() => this.flush());
    });
  }

  private parametersOf(request: CapSendsRequest): string {
    let profiles = this.profileIds.get(request.profiles);
    if (profiles === undefined) {
      profiles = ++this.profileCount;
      this.profileIds.set(request.profiles, profiles);
    }
    const { namespace, now, at, mode, channel, campaignId, forced, horizonMs } = request;
    // the rollout switches too: one call carries one mode, so requests with different switches stay apart
    const switches = [request.hotRecords === true, request.compactClasses === true];
    return JSON.stringify([namespace, now, at, mode, channel, campaignId, forced, horizonMs, profiles, switches]);
  }

  private flush(): void {
    const pending = this.pending;
    this.pending = [];
    // groups of requests with the same parameters and disjoint users
    const groups: { key: string; requests: PendingRequest[]; users: Set<number>; size: number }[] = [];
    for (const item of pending) {
      const key = this.parametersOf(item.request);
      const ids = item.request.sortedIds;
      const group = groups.find(
        (g) => g.key === key && g.size + ids.length <= MAX_COALESCED_USERS && !ids.some((id) => g.users.has(id)),
      );
      if (group) {
        group.requests.push(item);
        group.size += ids.length;
        for (const id of ids) group.users.add(id);
      } else {
        groups.push({ key, requests: [item], users: new Set(ids), size: ids.length });
      }
    }
    for (const group of groups) {
      if (group.requests.length === 1) {
        const [only] = group.requests as [PendingRequest];
        runCapSends(this.store, only.request).then(only.resolve, only.reject);
      } else {
        this.runGroup(group.requests, group.size).catch((error: unknown) => {
          for (const item of group.requests) item.reject(error);
        });
      }
    }
  }

  /** One plan for the users of every request of the group; each request gets its own verdicts or failure. */
  private async runGroup(group: PendingRequest[], size: number): Promise<void> {
    // merged ascending: user ID × 2^20 + position in the group, sorted as doubles (no comparator)
    const offsets: number[] = [];
    const keys = new Float64Array(size);
    const segments = new Uint8Array(size);
    let position = 0;
    for (const { request } of group) {
      offsets.push(position);
      for (let i = 0; i < request.sortedIds.length; i++) {
        keys[position] = (request.sortedIds[i] as number) * 2 ** 20 + position;
        segments[position] = request.segmentOf[i] as number;
        position++;
      }
    }
    keys.sort();
    const sortedIds = new Uint32Array(size);
    const segmentOf = new Uint8Array(size);
    const origin = new Uint32Array(size);
    for (let j = 0; j < size; j++) {
      const key = keys[j] as number;
      const at = key % 2 ** 20;
      origin[j] = at;
      sortedIds[j] = (key - at) / 2 ** 20;
      segmentOf[j] = segments[at] as number;
    }
    const ownerAt = (at: number) => {
      let owner = offsets.length - 1;
      while ((offsets[owner] as number) > at) owner--;
      return owner;
    };
    const first = (group[0] as PendingRequest).request;
    const merged = { ...first, sortedIds, segmentOf, held: mergedHeld(group) };
    const codes = new Uint8Array(size);
    const answered = new Uint8Array(size);
    const failures = await runCalls(
      this.store,
      planCapSends(merged),
      false,
      { codes, answered, windows: new Map() },
      (member) => ownerAt(origin[member] as number),
      group.length,
    );
    // each request's codes in its own order (a repeat within a request is adjacent in the merge, its first
    // occurrence first: the others keep 0, as runCapSends leaves them)
    const own = group.map(({ request }) => new Uint8Array(request.sortedIds.length));
    const ownAnswered = group.map(({ request }) => new Uint8Array(request.sortedIds.length));
    for (let j = 0; j < size; j++) {
      const at = origin[j] as number;
      const owner = ownerAt(at);
      (own[owner] as Uint8Array)[at - (offsets[owner] as number)] = codes[j] as number;
      (ownAnswered[owner] as Uint8Array)[at - (offsets[owner] as number)] = answered[j] as number;
    }
    group.forEach((item, owner) => {
      const failure = failures.find((f) => f.owners.has(owner));
      if (failure) item.reject(failureOf(failure.error, own[owner] as Uint8Array, ownAnswered[owner] as Uint8Array));
      else item.resolve({ verdicts: Verdicts.of(own[owner] as Uint8Array), windows: new Map() });
    });
  }
}

/** The held users of every request of a group, ascending, each once (a user held in two requests is held in both). */
function mergedHeld(group: readonly PendingRequest[]): Uint32Array | undefined {
  const lists = group.flatMap(({ request }) => (request.held && request.held.length > 0 ? [request.held] : []));
  if (lists.length === 0) return undefined;
  if (lists.length === 1) return lists[0];
  const all = new Uint32Array(lists.reduce((sum, list) => sum + list.length, 0));
  let k = 0;
  for (const list of lists) {
    all.set(list, k);
    k += list.length;
  }
  all.sort();
  let kept = 0;
  for (let i = 0; i < all.length; i++) if (i === 0 || all[i] !== all[i - 1]) all[kept++] = all[i] as number;
  return all.subarray(0, kept);
}

/** How planCapSends bounds a call (tests vary them to compare plans). */
export interface CallBounds {
  partialPageUsers: number;
}

/**
 * The script calls that decide every distinct user of the request: one slot each, bounded in keys, users and
 * users of partial block pages. How the users are split into calls never changes a decision: each user is
 * decided on its own history, at the request's `at` and identity.
 */
export function planCapSends(
  request: CapSendsRequest,
  bounds: CallBounds = { partialPageUsers: MAX_PARTIAL_PAGE_USERS_PER_CALL },
): CapSendsCall[] {
  const { sortedIds } = request;
  const held = heldOf(request);
  const mostCaps = request.profiles.reduce((most, profile) => Math.max(most, profile.caps.length), 1);
  const usersPerCall = request.withWindows
    ? Math.max(1, Math.floor(MAX_WINDOW_CAPS_PER_CALL / mostCaps))
    : MAX_USERS_PER_CALL;
  const profilesPerCall = Math.max(1, Math.floor(MAX_PROFILE_CAPS_PER_CALL / mostCaps));
  // pages by tag, in ascending page order (sortedIds is ascending, so a page's users are consecutive); a page
  // whose users pass a call's users or profiles goes in runs of its own
  const runsByTag = new Map<number, PageRun[]>();
  const allRuns: PageRun[] = [];
  const runOfProfile = new Int32Array(256).fill(-1);
  let run: PageRun | undefined;
  for (let i = 0; i < sortedIds.length; i++) {
    const id = sortedIds[i] as number;
    if (i > 0 && id === sortedIds[i - 1]) continue;
    const page = pageOf(id);
    const profile = request.segmentOf[i] as number;
    const fresh = runOfProfile[profile] !== allRuns.length - 1;
    if (run?.page === page && run.count < usersPerCall && !(fresh && run.profiles.length >= profilesPerCall)) {
      run.last = i;
      run.count++;
      if (fresh) {
        runOfProfile[profile] = allRuns.length - 1;
        run.profiles.push(profile);
      }
      continue;
    }
    runOfProfile[profile] = allRuns.length;
    run = {
      page,
      range: recordRangeOf(id),
      first: i,
      last: i,
      count: 1,
      heldFirst: 0,
      heldCount: 0,
      blockPath: false,
      profiles: [profile],
    };
    allRuns.push(run);
    const tag = capTagOf(id);
    const runs = runsByTag.get(tag);
    if (runs) runs.push(run);
    else runsByTag.set(tag, [run]);
  }
  // each page's held users (both lists ascending: one pass), and its path: a page the batch reaches densely,
  // held users included, takes its block
  let h = 0;
  for (const pageRun of allRuns) {
    while (h < held.length && pageOf(held[h] as number) < pageRun.page) h++;
    pageRun.heldFirst = h;
    while (h < held.length && pageOf(held[h] as number) === pageRun.page) h++;
    pageRun.heldCount = h - pageRun.heldFirst;
    pageRun.blockPath = pageRun.count + pageRun.heldCount >= BLOCK_PATH_MIN_USERS;
    if (!pageRun.blockPath) pageRun.heldCount = 0;
  }
  const calls: CapSendsCall[] = [];
  // the profiles of the call being planned: those stamped with its number
  const callOfProfile = new Int32Array(256).fill(-1);
  let callNumber = 0;
  for (const [tag, runs] of runsByTag) {
    let batch: PageRun[] = [];
    let ranges = new Set<number>();
    let users = 0;
    let partialUsers = 0;
    let blockPages = 0;
    let callProfiles = 0;
    callNumber++;
    for (const run of runs) {
      let newProfiles = 0;
      for (const profile of run.profiles) if (callOfProfile[profile] !== callNumber) newProfiles++;
      const extraRange = ranges.has(run.range) ? 0 : 1;
      const blockPath = run.blockPath;
      const keys = 1 + ranges.size + extraRange + blockPages + (blockPath ? 1 : 0);
      // a held user costs the script a pair of its page's argument, as a decided one does on a whole page
      const pageUsers = run.count + run.heldCount;
      const partial = blockPath && pageUsers < USERS_PER_PAGE ? pageUsers : 0;
      if (
        batch.length > 0 &&
        (keys > MAX_KEYS_PER_CALL ||
          users + pageUsers > usersPerCall ||
          callProfiles + newProfiles > profilesPerCall ||
          (partial > 0 && partialUsers + partial > bounds.partialPageUsers))
      ) {
        calls.push(buildCall(request, tag, batch, held));
        batch = [];
        ranges = new Set();
        users = 0;
        partialUsers = 0;
        blockPages = 0;
        callProfiles = 0;
        callNumber++;
        newProfiles = run.profiles.length;
      }
      for (const profile of run.profiles) callOfProfile[profile] = callNumber;
      callProfiles += newProfiles;
      batch.push(run);
      ranges.add(run.range);
      users += pageUsers;
      partialUsers += partial;
      if (blockPath) blockPages++;
    }
    if (batch.length > 0) calls.push(buildCall(request, tag, batch, held));
  }
  return calls;
}

/**
 * The request's held users as planned: none when the policy has so many profiles that HELD_PROFILE could be a
 * call's profile number (the pages are then partial, as without the mask).
 */
function heldOf(request: CapSendsRequest): Uint32Array {
  const held = request.held;
  if (held === undefined || request.withWindows || request.profiles.length >= HELD_PROFILE) return new Uint32Array(0);
  return held;
}

function buildCall(request: CapSendsRequest, tag: number, runs: PageRun[], held: Uint32Array): CapSendsCall {
  const { sortedIds, segmentOf } = request;
  const users = runs.reduce((sum, run) => sum + run.count, 0);
  const rangeIndex = new Map<number, number>();
  for (const run of runs) if (!rangeIndex.has(run.range)) rangeIndex.set(run.range, rangeIndex.size + 1);
  // only the profiles of this call's users travel, renumbered: the script's cost never depends on the policy's size.
  // Segments with the same caps and retentions share one number: the script decides (and successors) a
  // page's history once per profile present, so a policy whose segments repeat their caps costs one profile
  const localProfile = new Int16Array(256).fill(-1);
  const localOfContent = new Map<string, number>();
  const callProfiles: number[] = [];
  const localOf = (profile: number): number => {
    let local = localProfile[profile] as number;
    if (local < 0) {
      const content = packedProfile(request.profiles[profile] as ScriptProfile).content;
      local = localOfContent.get(content) ?? callProfiles.length;
      if (local === callProfiles.length) {
        localOfContent.set(content, local);
        callProfiles.push(profile);
      }
      localProfile[profile] = local;
    }
    return local;
  };
  const members = new Array<number>(users);
  let m = 0;
  // a call whose pages all take the user records, without "+windows" (a sparse campaign's): one argument per
  // range, its users' IDs as the range's blob holds them, then their profiles (the script extracts and compares
  // whole sections in C); otherwise one argument per page
  const byRange = !request.withWindows && runs.every((run) => !run.blockPath);
  const userArgs = byRange
    ? [...rangeIndex.keys()].map((range) => {
        const ofRange = runs.filter((run) => run.range === range);
        const count = ofRange.reduce((sum, run) => sum + run.count, 0);
        const arg = Buffer.allocUnsafe(2 + 5 * count);
        arg[0] = rangeIndex.get(range) as number;
        arg[1] = RANGE_USERS;
        let k = 0;
        for (const run of ofRange) {
          for (let i = run.first; i <= run.last; i++) {
            if (i > run.first && sortedIds[i] === sortedIds[i - 1]) continue;
            arg.writeUInt32BE(sortedIds[i] as number, 2 + 4 * k);
            arg[2 + 4 * count + k] = localOf(segmentOf[i] as number);
            k++;
            members[m++] = i;
          }
        }
        return arg;
      })
    : runs.map((run) => {
        const spec = Buffer.allocUnsafe(5 + 2 * (run.count + run.heldCount));
        spec[0] = rangeIndex.get(run.range) as number;
        spec[1] = run.blockPath ? 1 : 0;
        spec.writeUIntBE(run.page, 2, 3);
        // users ascending, held ones merged in: the script relies on it (a whole page's pairs are offsets
        // 0..255 in order)
        let k = 5;
        let h = run.heldFirst;
        const heldEnd = run.heldFirst + run.heldCount;
        for (let i = run.first; i <= run.last; i++) {
          if (i > run.first && sortedIds[i] === sortedIds[i - 1]) continue;
          const id = sortedIds[i] as number;
          for (; h < heldEnd && (held[h] as number) < id; h++, k += 2) {
            spec[k] = (held[h] as number) % USERS_PER_PAGE;
            spec[k + 1] = HELD_PROFILE;
          }
          spec[k] = id % USERS_PER_PAGE;
          spec[k + 1] = localOf(segmentOf[i] as number);
          k += 2;
          members[m++] = i;
        }
        for (; h < heldEnd; h++, k += 2) {
          spec[k] = (held[h] as number) % USERS_PER_PAGE;
          spec[k + 1] = HELD_PROFILE;
        }
        return spec;
      });
  const profiles = callProfiles.map((p) => packedProfile(request.profiles[p] as ScriptProfile));
  // a profile with the caps of an earlier one of the call and periods of its own (a segment's calendar caps in
  // each of its users' zones) travels as [that one's number, its periods]: the script parses the caps once
  const firstWithCaps = new Map<string, number>();
  const packedCaps = profiles.map((profile, local) => {
    if (profile.periods === undefined) return profile.caps;
    const earlier = firstWithCaps.get(profile.capsKey);
    if (earlier === undefined) {
      firstWithCaps.set(profile.capsKey, local);
      return profile.caps;
    }
    return profile.withCapsOf(earlier);
  });
  // one declared key (it routes the call); the script names the record hashes and blocks from the prefix
  const keys = [capIdentityKey(request.namespace, tag)];
  const args: (string | Buffer)[] = [
    String(request.now),
    String(request.at),
    `${request.mode}${request.hotRecords ? "+hot" : ""}${request.compactClasses ? "+compact" : ""}${request.withWindows ? "+windows" : ""}`,
    `${request.channel}:${request.campaignId}`,
    request.forced ? "1" : "0",
    String(request.horizonMs),
    // packed: the script unpacks it in C (text took 2 ms of Lua for 64 profiles × 32 caps)
    profiles.length === 1
      ? (profiles[0] as PackedProfile).single
      : Buffer.concat([msgpackArrayHeader(profiles.length), ...packedCaps]),
    profiles.length === 1
      ? (profiles[0] as PackedProfile).retentions
      : profiles.map((profile) => profile.retentions).join(","),
    capKeyPrefix(request.namespace, tag),
    [...rangeIndex.keys()].join(","),
    String(request.blobSplitBytes ?? BLOB_SPLIT_BYTES),
    // (no page names: the script lists the identity table's page markers, and names only the pages it reads)
    ...userArgs,
  ];
  return { keys, args, members, tag, pages: runs.map((run) => run.page) };
}

/**
 * A profile as ARGV[7] and ARGV[8] carry it: msgpack of [windows, maxima, everyChannel, fullMaxima?, periods?], and
 * "<kept>:<window>".
 */
interface PackedProfile {
  /** The profile's content as text: segments whose profiles read the same share one number in a call. */
  content: string;
  caps: Buffer;
  /** The first four arrays as text: profiles whose only difference is their periods share them in a call. */
  capsKey: string;
  /** The calendar periods (the fifth array), when a calendar cap applies. */
  periods?: unknown[];
  /** ARGV[7]'s element [earlier, periods]: the caps of the call's profile `earlier`, with this one's periods. */
  withCapsOf(earlier: number): Buffer;
  /** ARGV[7] of a call whose users are all of this profile (a one-element array). */
  single: Buffer;
  retentions: string;
}

/** Each profile packed once (profiles live as long as their policy: Capper keeps them per policy and channel). */
const packedProfiles = new WeakMap<ScriptProfile, PackedProfile>();
function packedProfile(profile: ScriptProfile): PackedProfile {
  let packed = packedProfiles.get(profile);
  if (packed === undefined) {
    const element: unknown[] = [
      profile.caps.map((cap) => cap.windowMs),
      profile.caps.map((cap) => cap.max),
      profile.caps.map((cap) => (cap.everyChannel ? 1 : 0)),
    ];
    // the caps' own maxima only where a reserve applies: a call without one is the same bytes as before
    const reserved = profile.caps.some((cap) => cap.fullMax !== undefined);
    const periods = profile.caps.some((cap) => cap.period !== undefined);
    if (reserved || periods) element.push(reserved ? profile.caps.map((cap) => cap.fullMax ?? cap.max) : null);
    const capsKey = JSON.stringify(element);
    // the calendar periods only where a calendar cap applies (an empty array: a rolling cap)
    const periodArrays = periods ? profile.caps.map((cap) => cap.period ?? []) : undefined;
    if (periodArrays) element.push(periodArrays);
    // by the earlier profile's number in the call (below 256): encoded once each, not once per call (a dense
    // campaign with 6 zones' calendar caps carries 5 in each call of 1,024 users)
    const withCaps: Buffer[] = [];
    packed = {
      // stringified once per profile, not per call (a /v1/frequency check is one call)
      content: JSON.stringify(profile),
      caps: Buffer.from(encode(element)),
      capsKey,
      ...(periodArrays ? { periods: periodArrays } : {}),
      withCapsOf: (earlier) => {
        let bytes = withCaps[earlier];
        if (bytes === undefined) {
          bytes = Buffer.from(encode([earlier, periodArrays]));
          withCaps[earlier] = bytes;
        }
        return bytes;
      },
      single: Buffer.from(encode([element])),
      retentions: `${profile.retentionMs}:${profile.windowRetentionMs}`,
    };
    packedProfiles.set(profile, packed);
  }
  return packed;
}

/** The msgpack header of an array of `length` elements (its elements follow, each encoded on its own). */
function msgpackArrayHeader(length: number): Buffer {
  if (length < 16) return Buffer.of(0x90 | length);
  const header = Buffer.alloc(3);
  header[0] = 0xdc;
  header.writeUInt16BE(length, 1);
  return header;
}

/** Splits a reply into the decision byte of each member and the "+windows" lines that follow (one per member). */
export function readCapSendsReply(reply: Buffer, members: number): { codes: Buffer; lines: string[] } {
  if (reply.length < members) throw new Error(`cap-sends replied ${reply.length} bytes for ${members} users`);
  const text = reply.subarray(members).toString("latin1");
  return { codes: reply.subarray(0, members), lines: text === "" ? [] : text.slice(0, -1).split("\n") };
}

/** A "+windows" line: "<retry at> <used> <reset at> ..." (a pair per cap; retry at 0 for none). */
function parseWindowsLine(line: string): UserWindows {
  const [retryAt, ...pairs] = line.split(" ").map(Number);
  if (retryAt === undefined || pairs.length % 2 !== 0 || pairs.some(Number.isNaN)) {
    throw new Error(`cap-sends replied an unreadable windows line "${line}"`);
  }
  const caps = [];
  for (let i = 0; i < pairs.length; i += 2) caps.push({ used: pairs[i] as number, resetAt: pairs[i + 1] as number });
  return retryAt > 0 ? { caps, retryAt } : { caps };
}
