// Every Redis key Tollgate uses is built here, and only here.
//
// Capping keys hold the send logs of a block of USERS_PER_BLOCK consecutive user IDs; BLOCKS_PER_GROUP
// consecutive blocks share one hash tag, so one script call (one slot, no CROSSSLOT) can decide up to
// USERS_PER_GROUP users:  <namespace>:cap:{<group>}:<block>   e.g. tg:cap:{976}:3 holds users 999,936..1,000,191.
import { ValidationError } from "./errors.ts";

export const USERS_PER_BLOCK = 256;
export const BLOCKS_PER_GROUP = 4;
export const USERS_PER_GROUP = USERS_PER_BLOCK * BLOCKS_PER_GROUP;

export const DEFAULT_NAMESPACE = "tg";

/** A namespace may not hold braces: the group number must stay the key's hash tag. */
export const NAMESPACE_PATTERN = /^[A-Za-z0-9_.:-]{1,64}$/;
export const NAMESPACE_RULE = "expected 1-64 characters of A-Z, a-z, 0-9, _ . : -";

export function checkNamespace(namespace: string): string {
  if (!NAMESPACE_PATTERN.test(namespace)) throw new ValidationError("namespace", NAMESPACE_RULE);
  return namespace;
}

/** The slot group (hash tag) of a user. */
export function groupOf(userId: number): number {
  return Math.floor(userId / USERS_PER_GROUP);
}

/** Which block of its group a user's log lives in (0..BLOCKS_PER_GROUP-1). */
export function blockInGroupOf(userId: number): number {
  return Math.floor(userId / USERS_PER_BLOCK) % BLOCKS_PER_GROUP;
}

/** The user's position inside its block (0..USERS_PER_BLOCK-1). */
export function offsetInBlockOf(userId: number): number {
  return userId % USERS_PER_BLOCK;
}

export function capBlockKey(namespace: string, group: number, blockInGroup: number): string {
  return `${namespace}:cap:{${group}}:${blockInGroup}`;
}

/** The key of the block holding `userId`'s log. */
export function capKeyOfUser(namespace: string, userId: number): string {
  return capBlockKey(namespace, groupOf(userId), blockInGroupOf(userId));
}

/**
 * A rate limit's state: `<namespace>:rl:{<tag>}:<algorithm>:<key>`. One limit uses its own key as the
 * hash tag; the limits of one /v1/limits request share their scope, so one script call reaches them all.
 * The algorithm is part of the key (another algorithm's state is never misread); the parameters are not
 * (changing them keeps the usage).
 */
export function limitKey(namespace: string, tag: string, algorithm: string, key: string): string {
  return `${namespace}:rl:{${tag}}:${algorithm}:${key}`;
}

/**
 * The baseline the bench compares against (Grab's design): one sorted set per user, hashed by the user
 * unless `hashTag` pins it to a slot (redis-benchmark's `__rand_int__` keys). Not used by the product;
 * built here so every key format lives in one module.
 */
export function perUserLogKey(namespace: string, user: number | string, hashTag?: string): string {
  return hashTag === undefined ? `${namespace}:log:{${user}}` : `${namespace}:log:{${hashTag}}:${user}`;
}
