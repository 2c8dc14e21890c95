// Deterministic user IDs for the workloads section and the instruction probes that replay its scenarios.
import { BATCH } from "./campaign.ts";

/** A deterministic stream of distinct user IDs below `limit`. */
export function scatteredIds(count: number, limit: number, seed: number): number[] {
  const ids = new Set<number>();
  let state = seed >>> 0;
  while (ids.size < count) {
    state = (Math.imul(state, 1_664_525) + 1_013_904_223) >>> 0;
    ids.add(state % limit);
  }
  return [...ids];
}

/** The users 0..users - 1 a campaign of the busy week reaches: a random half, a different one per campaign. */
export function weekHalf(users: number, campaign: number): number[] {
  return Array.from({ length: users }, (_, id) => id).filter((id) => {
    // a mixing hash of (user, campaign): each campaign a different half (an XOR of two products
    // would give every campaign the same half or its complement, and every page two histories)
    let h = Math.imul(id ^ Math.imul(campaign + 1, 0x9e3779b1), 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    return ((h ^ (h >>> 16)) & 1) === 1;
  });
}

/** `ids` in batches of BATCH, as a campaign message carries them. */
export const batchesOf = (ids: number[]) =>
  Array.from({ length: Math.ceil(ids.length / BATCH) }, (_, b) => ids.slice(b * BATCH, (b + 1) * BATCH));
