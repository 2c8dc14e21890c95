// Campaign priorities and the room a cap keeps for the higher ones: a send of priority p may fill each cap up
// to its max less what the cap reserves for priorities above p, so a promotional blast never takes the slot
// a password reset needs.
import { z } from "zod";

/** The named priorities, on the numeric scale a campaign may also use (higher goes first). */
export const PRIORITY_NAMES = { promotional: 0, triggered: 50, transactional: 100 } as const;
export type PriorityName = keyof typeof PRIORITY_NAMES;
export const MIN_PRIORITY = 0;
export const MAX_PRIORITY = 100;
/**
 * A campaign that names no priority is promotional, the lowest: a batch that forgot the field can never take
 * room kept for password resets; one that needs the room has to say so.
 */
export const DEFAULT_PRIORITY: number = PRIORITY_NAMES.promotional;

const PRIORITY_EXPECTED = `expected "transactional", "triggered", "promotional" or an integer from ${MIN_PRIORITY} to ${MAX_PRIORITY}`;

/** A priority as a batch or a check names it: a name or a number; parsed to its number. */
export const prioritySchema = z
  .custom<PriorityName | number>(
    (value) =>
      (typeof value === "string" && Object.hasOwn(PRIORITY_NAMES, value)) ||
      (typeof value === "number" && Number.isInteger(value) && value >= MIN_PRIORITY && value <= MAX_PRIORITY),
    PRIORITY_EXPECTED,
  )
  .transform((value) => (typeof value === "number" ? value : PRIORITY_NAMES[value]));

/** A reserve's key: a priority name, or a number as JSON object keys spell it ("75"). */
function reservePriorityOf(key: string): number | undefined {
  if (Object.hasOwn(PRIORITY_NAMES, key)) return PRIORITY_NAMES[key as PriorityName];
  if (!/^(0|[1-9]\d{0,2})$/.test(key)) return undefined;
  const value = Number(key);
  return value <= MAX_PRIORITY ? value : undefined;
}

/** One reserve of a cap: `slots` of its max kept for sends of priority `priority` or higher. */
export interface Reserve {
  priority: number;
  slots: number;
}

/**
 * `"reserve": { "triggered": 1 }` on a cap: by priority, how many of its max only sends of that priority or
 * higher may take. Parsed to reserves by ascending priority; the cap's schema checks their total against max.
 */
export const reserveSchema = z
  .record(z.string(), z.int("expected a number of slots: an integer from 1").min(1, "expected at least 1 slot"))
  .superRefine((reserve, ctx) => {
    const seen = new Map<number, string>();
    for (const key of Object.keys(reserve)) {
      const priority = reservePriorityOf(key);
      if (priority === undefined) {
        ctx.addIssue({ code: "custom", path: [key], message: `unknown priority "${key}" (${PRIORITY_EXPECTED})` });
      } else if (priority === MIN_PRIORITY) {
        ctx.addIssue({
          code: "custom",
          path: [key],
          message: `a reserve for priority ${MIN_PRIORITY} (promotional) or higher is kept from nobody: reserve for a higher one`,
        });
      } else if (seen.has(priority)) {
        ctx.addIssue({
          code: "custom",
          path: [key],
          message: `"${key}" is priority ${priority}, as "${seen.get(priority)}" is`,
        });
      }
      if (priority !== undefined) seen.set(priority, key);
    }
  })
  .transform((reserve): Reserve[] =>
    Object.entries(reserve)
      .map(([key, slots]) => ({ priority: reservePriorityOf(key) as number, slots }))
      .sort((a, b) => a.priority - b.priority),
  );

/** The slots of `reserves` kept from a send of `priority`: those reserved for priorities above it. */
export function reservedAbove(reserves: readonly Reserve[] | undefined, priority: number): number {
  let slots = 0;
  for (const reserve of reserves ?? []) if (reserve.priority > priority) slots += reserve.slots;
  return slots;
}

/** The slots of `reserves` in all. */
export function reservedInAll(reserves: readonly Reserve[] | undefined): number {
  return reservedAbove(reserves, MIN_PRIORITY - 1);
}
