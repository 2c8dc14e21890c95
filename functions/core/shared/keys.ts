// Every Redis key Tollgate uses is built here, and only here.
//
// Capping keys (see lua/cap-sends.lua) share one hash tag per CAP_TAGS-th group of USERS_PER_GROUP
// consecutive user IDs, so one script call (one slot) decides many users, dense or sparse:
//   <namespace>:cap:{<tag>}:ids          the tag's identity table
//   <namespace>:cap:{<tag>}:u:<range>    the record blob of the IDs in range (user ID >> RECORD_RANGE_BITS),
//                                        or its directory and parts u:<range>:<lowest ID> once it split
//   <namespace>:cap:{<tag>}:r:<range>    busy users' records in range, and the records before the blobs
//   <namespace>:cap:{<tag>}:p:<page>     the block of page (user ID / USERS_PER_PAGE), e.g. tg:cap:{208}:p:3906
import { ValidationError } from "./errors.ts";

/** A block holds one page of consecutive user IDs. */
export const USERS_PER_PAGE = 256;
/** Consecutive IDs that always share a tag: a dense batch is decided USERS_PER_GROUP users a call. */
export const USERS_PER_GROUP = 1024;
/** Groups are spread over this many tags, so a sparse batch still puts many users in one call. */
export const CAP_TAGS = 256;
/** Sparse users of one tag share a record hash per 2^29 IDs: ~100 users a hash for 100k IDs at random in 0..2^31. */
export const RECORD_RANGE_BITS = 29;

export const DEFAULT_NAMESPACE = "tg";

/** A namespace may not hold braces: the tag must stay the key's hash tag. */
export const NAMESPACE_PATTERN = /^[A-Za-z0-9_.:-]{1,64}$/;
export const NAMESPACE_RULE = "expected 1-64 characters of A-Z, a-z, 0-9, _ . : -";

export function checkNamespace(namespace: string): string {
  if (!NAMESPACE_PATTERN.test(namespace)) throw new ValidationError("namespace", NAMESPACE_RULE);
  return namespace;
}

/** The hash tag of a user's capping keys. */
export function capTagOf(userId: number): number {
  return Math.floor(userId / USERS_PER_GROUP) % CAP_TAGS;
}

/** The page (block) a user belongs to. */
export function pageOf(userId: number): number {
  return Math.floor(userId / USERS_PER_PAGE);
}

/** The record range a user belongs to (its record hash within the tag). */
export function recordRangeOf(userId: number): number {
  return Math.floor(userId / 2 ** RECORD_RANGE_BITS);
}

/**
 * What every capping key of a tag starts with. lua/cap-sends.lua builds the record and page keys from it
 * ("r:<range>", and the page names of capPageName()), so the functions below and the script must agree.
 */
export function capKeyPrefix(namespace: string, tag: number): string {
  return `${namespace}:cap:{${tag}}:`;
}

export function capIdentityKey(namespace: string, tag: number): string {
  return `${capKeyPrefix(namespace, tag)}ids`;
}

export function capBlobKey(namespace: string, tag: number, range: number): string {
  return `${capKeyPrefix(namespace, tag)}u:${range}`;
}

export function capRecordKey(namespace: string, tag: number, range: number): string {
  return `${capKeyPrefix(namespace, tag)}r:${range}`;
}

/**
 * A page's name within its tag: the marker field of the tag's identity table that says the page has a block,
 * and its block key after the prefix (lua/cap-sends.lua makes the same from a page's number).
 */
export function capPageName(page: number): string {
  return `p:${page}`;
}

export function capPageKey(namespace: string, page: number): string {
  return `${capKeyPrefix(namespace, capTagOf(page * USERS_PER_PAGE))}${capPageName(page)}`;
}

/** Characters that could open or close a hash tag, and the escape character itself. */
const BRACES = /[%{}]/;
const BRACES_ALL = /[%{}]/g;
/** A UTF-16 surrogate that is not half of a pair. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * Scope and key text inside a Redis key: "%", "{" and "}" percent-encoded, and each lone surrogate as `%u`
 * and its four hex digits. The text can then never close or open a hash tag, and two different texts never
 * encode alike: ioredis sends keys as UTF-8, where every lone surrogate (valid in JSON as `\ud800`) becomes
 * U+FFFD, so "\ud800" and "\udc00" would otherwise name one key. Text with neither (nearly every key) is
 * returned as it is after two scans, without a replace (this runs on every check).
 */
function encodeName(text: string): string {
  const escaped = BRACES.test(text)
    ? text.replace(BRACES_ALL, (c) => (c === "%" ? "%25" : c === "{" ? "%7B" : "%7D"))
    : text;
  return isWellFormed(escaped)
    ? escaped
    : escaped.replace(LONE_SURROGATE, (c) => `%u${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** String.prototype.isWellFormed (ES2024, Node 20+; the compiler's library here is ES2022). */
const isWellFormed = (text: string): boolean => (text as unknown as { isWellFormed(): boolean }).isWellFormed();

/**
 * A rate limit's state, POST /v1/limit: `<namespace>:rl:{<key>}:<algorithm>`; the key is its own hash tag.
 * The algorithm is part of the key (another algorithm's state is never misread); the parameters are not
 * (changing them keeps the usage).
 */
export function limitKey(namespace: string, algorithm: string, key: string): string {
  return `${namespace}:rl:{${encodeName(key)}}:${algorithm}`;
}

/**
 * A limit of a POST /v1/limits scope: `<namespace>:rls:{<scope>}:<algorithm>:<key>`. Every limit of a scope
 * shares its hash tag, so one script call reaches them all; "rls" keeps these apart from /v1/limit's keys.
 */
export function scopedLimitKey(namespace: string, scope: string, algorithm: string, key: string): string {
  return `${namespace}:rls:{${encodeName(scope)}}:${algorithm}:${encodeName(key)}`;
}

/**
 * The baseline the bench compares against (Grab's design): one sorted set per user, hashed by the user
 * unless `hashTag` pins it to a slot (redis-benchmark's `__rand_int__` keys). Not used by the product;
 * built here so every key format lives in one module.
 */
export function perUserLogKey(namespace: string, user: number | string, hashTag?: string): string {
  return hashTag === undefined ? `${namespace}:log:{${user}}` : `${namespace}:log:{${hashTag}}:${user}`;
}
