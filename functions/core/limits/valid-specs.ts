// What POST /v1/limit requests said besides their key and time, remembered once validated: a client sends
// the same algorithm, parameters and cost again and again with other keys and times, and parsing all of it
// again (strict zod) cost more than the rest of the limiter's own work. Only the key and `at` are parsed
// per request when the rest matches a remembered request field for field.
import type { LimitRequest } from "./limit-specs.ts";
import { limitNameSchema, MAX_LIMIT_NAME_LENGTH, requestTimeSchema } from "./limit-specs.ts";

/** A request's fields other than `key` and `at`, as validation returned them. */
export type ValidSpec = Omit<LimitRequest, "key" | "at">;

/** A remembered request: its other fields' names and values in their order, and what they validated to. */
interface Entry {
  readonly names: readonly string[];
  readonly values: readonly (string | number | boolean)[];
  readonly spec: ValidSpec;
}

/**
 * The last few distinct specs that passed validation, the most recent first. Holding only what passed, a
 * lookup can only answer with the value the full validation gave for the same fields; whatever it cannot
 * answer (another spec, an invalid key or time, an object or array value) goes to the full validation,
 * which words the error. A handful suffices: an execution environment serves a few clients' limits, and a
 * miss costs only the full validation.
 */
export class ValidSpecs {
  private readonly entries: Entry[] = [];

  constructor(private readonly maxEntries = 16) {}

  /** The validated request, if its other fields match a remembered one and its key and `at` are valid. */
  lookup(request: unknown): LimitRequest | undefined {
    if (typeof request !== "object" || request === null) return undefined;
    const entry = this.entries.find((candidate) => matches(candidate, request));
    if (entry === undefined) return undefined;
    const { key, at } = request as { key?: unknown; at?: unknown };
    if (!isLimitName(key) || !(at === undefined || requestTimeSchema.safeParse(at).success)) return undefined;
    // Object.assign, not a spread: V8's object spread cost as much as the rest of the lookup
    const valid = Object.assign({ key: key as string }, entry.spec) as LimitRequest;
    if (at !== undefined) valid.at = at as number;
    return valid;
  }

  /** Remembers the fields of `request`, which validated to `valid`. */
  remember(request: unknown, valid: LimitRequest): void {
    if (typeof request !== "object" || request === null || Array.isArray(request)) return;
    const names: string[] = [];
    const values: (string | number | boolean)[] = [];
    // for...in, as zod reads a strict object: own and inherited enumerable fields alike
    for (const name in request) {
      if (name === "key" || name === "at") continue;
      const value = (request as Record<string, unknown>)[name];
      // an object could change after it was validated: only values that cannot are remembered
      if (typeof value !== "number" && typeof value !== "string" && typeof value !== "boolean") return;
      names.push(name);
      values.push(value);
    }
    const { key: _key, at: _at, ...spec } = valid;
    // a field validation read but for...in does not list (not enumerable) could differ unseen next time
    if (Object.keys(spec).length !== names.length) return;
    this.entries.unshift({ names, values, spec });
    if (this.entries.length > this.maxEntries) this.entries.pop();
  }
}

/**
 * Whether `request` has exactly the entry's fields (besides `key` and `at`), in its order, with its values:
 * the fields for...in lists, own or inherited, which are the fields zod reads and refuses unknown ones of.
 */
function matches(entry: Entry, request: object): boolean {
  const { names, values } = entry;
  let i = 0;
  for (const name in request) {
    if (name === "key" || name === "at") continue;
    // Object.is: the same number (-0 is not 0), text or boolean, never an object that looks the same
    if (names[i] !== name || !Object.is(values[i], (request as Record<string, unknown>)[name])) return false;
    i++;
  }
  return i === names.length && !Array.isArray(request);
}

/**
 * Whether `key` passes limitNameSchema. The usual key, a string of 1 to 256 code units, is what the schema
 * accepts, and is told without it (its safeParse cost more than the rest of the lookup); anything else goes
 * to the schema (test/unit/limits/valid-specs.test.ts holds the two to the same answers).
 */
export function isLimitName(key: unknown): boolean {
  if (typeof key === "string" && key.length >= 1 && key.length <= MAX_LIMIT_NAME_LENGTH) return true;
  return limitNameSchema.safeParse(key).success;
}
