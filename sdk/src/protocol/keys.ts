// Every Redis key Tollgate uses is built here, and only here: the service's (capping, rate limits, quota
// sync) and the SDK's direct transport's (quota sync) alike. Keys are a stored format: a format changed here
// no longer finds the state the running release wrote (test/unit/key-formats.test.ts writes each one out).
//
// Capping keys (see lua/cap-sends/cap-sends.lua's header) share one hash tag per CAP_TAGS-th group of USERS_PER_GROUP
// consecutive user IDs, so one script call (one slot) decides many users, dense or sparse:
//   <namespace>:cap:{<tag>}:ids          the tag's identity table
//   <namespace>:cap:{<tag>}:u:<range>    the record blob of the IDs in range (user ID >> RECORD_RANGE_BITS),
//                                        or its directory and parts u:<range>:<lowest ID> once it split
//   <namespace>:cap:{<tag>}:r:<range>    busy users' records in range, and the records before the blobs; a hot
//                                        user's chunks are its fields "<user ID>:<seq>" (the script names them)
//   <namespace>:cap:{<tag>}:p:<page>     the block of page (user ID / USERS_PER_PAGE), e.g. tg:cap:{208}:p:3906
//
// Quota keys (see lua/quota-sync/ and wire.ts) share one hash tag per slot group of a rule:
//   <ns>:q:{<rule>.<group>}:cfg       the rule as the script reads it: hash { v: version, r: encodeRule(rule) }
//   <ns>:q:{<rule>.<group>}:seq       per instance: the highest sequence applied and a 32-bit mask below it
//   <ns>:q:{<rule>.<group>}:inst      sorted set: instance id -> last sync time (active-instance count)
//   <ns>:q:{<rule>.<group>}:k:<key>   one quota key: hash { L: layout, h: demand, ring cursors, latest
//                                     buckets and window sums, r: older buckets (packed), i:<instance>:
//                                     that instance's demand and grant } (lua/quota-sync/key-rings.lua)
//   <ns>:q:rules                      hash rule name -> stamp of the policy that wrote it: the rules in
//                                     Redis, so any process can remove those a policy no longer has
//   <ns>:q:tenants                    hash tenant namespace -> stamp: the tenant namespaces holding rules,
//                                     so a tenant taken out of the policy has its rules removed too
// Rule names and instance ids match NAME_PATTERN (no braces), and the key text comes after the tag, so no
// quota key can leave its slot or collide with another rule's.
//
// Rate-limit keys, the caller's key or scope as the hash tag, its text encoded (encodeName) so that it cannot
// open or close one:
//   <ns>:rl:{<key>}:<algorithm>              POST /v1/limit
//   <ns>:rls:{<scope>}:<algorithm>:<key>     POST /v1/limits, every limit of a scope in one slot
// A tenant's keys (docs/tenants.md): the rate-limit and quota keys above with `<ns>:t:<tenant>` as their
// namespace (tenantNamespace); a tenant namespace has no ":" and no braces, so one tenant's keys are never
// a prefix of another's, and what a request names comes after it.
// The bench's baseline (not the product's): <ns>:log:{<user>} or <ns>:log:{<tag>}:<user> (perUserLogKey).
import { WireError } from "./errors.ts";

/** A block holds one page of consecutive user IDs. */
export const USERS_PER_PAGE = 256;
/** Consecutive IDs that always share a tag: a dense batch is decided USERS_PER_GROUP users a call. */
export const USERS_PER_GROUP = 1024;
/** Groups are spread over this many tags, so a sparse batch still puts many users in one call. */
export const CAP_TAGS = 256;
/** Sparse users of one tag share a record hash per 2^29 IDs: ~100 users a hash for 100k IDs at random in 0..2^31. */
export const RECORD_RANGE_BITS = 29;

export const DEFAULT_NAMESPACE = "tg";

/**
 * Namespaces, quota rule names and instance ids: no braces, so the tag stays the key's hash tag and a name
 * cannot escape it.
 */
export const NAME_PATTERN = /^[A-Za-z0-9_.:-]{1,64}$/;
/** What NAME_PATTERN asks for, in words (the message of a name that does not match it). */
export const NAME_RULE = "expected 1-64 characters of A-Z, a-z, 0-9, _ . : -";

/** A tenant namespace: 1-32 characters of a-z, 0-9, "-" (no ":", no braces). */
export const TENANT_NAMESPACE_PATTERN = /^[a-z0-9][a-z0-9-]{0,31}$/;
/** The longest namespace a key may have (NAME_PATTERN's), a tenant's `<namespace>:t:<tenant>` included. */
export const MAX_NAMESPACE_LENGTH = 64;
/** The longest KEY_NAMESPACE that leaves room for a tenant namespace of one character. */
export const MAX_KEY_NAMESPACE_LENGTH = MAX_NAMESPACE_LENGTH - ":t:".length - 1;

/**
 * Why `<namespace>:t:<tenant>` cannot be a key namespace, if it cannot (a tenant namespace the policy admits
 * may still be too long beside a long KEY_NAMESPACE): the policy's validation and tenantNamespace say the same.
 */
export function tenantNamespaceProblem(namespace: string, tenant: string): string | undefined {
  if (!TENANT_NAMESPACE_PATTERN.test(tenant)) return 'expected 1-32 characters of a-z, 0-9, "-"';
  const length = namespace.length + ":t:".length + tenant.length;
  if (length <= MAX_NAMESPACE_LENGTH) return undefined;
  const room = MAX_NAMESPACE_LENGTH - namespace.length - ":t:".length;
  return `with KEY_NAMESPACE "${namespace}" the tenant's keys would start with ${length} characters (at most ${MAX_NAMESPACE_LENGTH}): a tenant namespace of at most ${Math.max(0, room)} characters here`;
}

/**
 * The namespace of every rate-limit and quota key of one tenant: `<namespace>:t:<tenant>`. The server puts
 * each request's keys here from the caller's identity; a tenant's Redis user may reach `<this>:*` only.
 */
export function tenantNamespace(namespace: string, tenant: string): string {
  checkName("namespace", namespace);
  const problem = tenantNamespaceProblem(namespace, tenant);
  if (problem) throw new WireError("tenant", problem);
  const scoped = `${namespace}:t:${tenant}`;
  checkName("namespace", scoped);
  return scoped;
}

/**
 * The key pattern of a tenant's Redis user (an ACL `~pattern`): the tenant's quota keys and nothing else.
 * The namespace holds no glob character (NAME_PATTERN), so the pattern matches exactly that prefix. It takes
 * the rules' configuration (`:cfg`) in too: FCALL needs write access to every key it declares, and the
 * quota script declares the configuration (docs/tenants.md: what that leaves a tenant).
 */
export function tenantQuotaKeyPattern(namespace: string, tenant: string): string {
  return `${tenantNamespace(namespace, tenant)}:q:*`;
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
 * What every capping key of a tag starts with. cap-sends builds the record and page keys from it
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
 * and its block key after the prefix (lua/cap-sends/page-markers.lua makes the same from a page's number).
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

/** A quota key's text is 1 to this many UTF-16 code units. */
export const MAX_KEY_LENGTH = 256;
/** A quota rule's keys are spread over at most this many slot groups (hash tags). */
export const MAX_SLOT_GROUPS = 64;

/** A name of a quota key (namespace, rule, instance id), or a WireError naming `field`. */
export function checkName(field: string, value: string): void {
  if (!NAME_PATTERN.test(value)) throw new WireError(field, NAME_RULE);
}

/** FNV-1a (32-bit) over UTF-16 code units: the same group for a key in every runtime. */
export function slotGroupOf(key: string, slotGroups: number): number {
  if (slotGroups <= 1) return 0;
  let hash = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    hash ^= key.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0) % slotGroups;
}

/** The prefix every Redis key of one slot group starts with, hash tag included. */
export function slotGroupPrefix(namespace: string, rule: string, group: number): string {
  checkName("namespace", namespace);
  checkName("rule", rule);
  if (!Number.isInteger(group) || group < 0 || group >= MAX_SLOT_GROUPS) {
    throw new WireError("group", `expected an integer 0..${MAX_SLOT_GROUPS - 1}`);
  }
  return `${namespace}:q:{${rule}.${group}}`;
}

export interface SlotGroupKeys {
  config: string;
  sequences: string;
  instances: string;
}

export function slotGroupKeys(namespace: string, rule: string, group: number): SlotGroupKeys {
  const prefix = slotGroupPrefix(namespace, rule, group);
  return { config: `${prefix}:cfg`, sequences: `${prefix}:seq`, instances: `${prefix}:inst` };
}

/**
 * The store's clock as the test build of quota-sync reads it (test/support/lua/store-now.lua), in the slot
 * group's own hash slot: the script's configuration key with `:clock` for `:cfg`. The production script never
 * reads it (test/unit/tooling/lua-scripts.test.ts).
 */
export function slotGroupTestClockKey(namespace: string, rule: string, group: number): string {
  return `${slotGroupPrefix(namespace, rule, group)}:clock`;
}

/** The index of the quota rules written to Redis (rule name -> the stamp of the policy that wrote it). */
export function quotaRuleIndexKey(namespace: string): string {
  checkName("namespace", namespace);
  return `${namespace}:q:rules`;
}

/**
 * The index of the tenant namespaces quota rules were written in (tenant namespace -> the stamp of the policy
 * that wrote them), under the deployment's namespace: a tenant taken out of the policy still has its
 * namespace's rules removed when the next policy is published (docs/tenants.md).
 */
export function quotaTenantIndexKey(namespace: string): string {
  checkName("namespace", namespace);
  return `${namespace}:q:tenants`;
}

/** A quota key's state; `prefix` from slotGroupPrefix. The key text follows the tag, so it cannot escape it. */
export function quotaKey(prefix: string, key: string): string {
  const problem = quotaKeyProblem(key);
  if (problem) throw new WireError("key", problem);
  return `${prefix}:k:${key}`;
}

/**
 * Why `key` cannot be a quota key, if it cannot: its length, or a lone UTF-16 surrogate (valid in JSON as
 * `\ud800`, but Redis keys travel as UTF-8, where every lone surrogate becomes U+FFFD: "\ud800" and
 * "\udc00" would count in one key).
 */
export function quotaKeyProblem(key: string): string | undefined {
  if (key.length === 0 || key.length > MAX_KEY_LENGTH) return `expected 1-${MAX_KEY_LENGTH} characters`;
  // String.prototype.isWellFormed: ES2024, Node 20+ (the compiler's library here is ES2022)
  if (!(key as unknown as { isWellFormed(): boolean }).isWellFormed()) return "expected no lone UTF-16 surrogate";
  return undefined;
}
