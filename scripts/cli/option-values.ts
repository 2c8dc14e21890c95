// The CLI's usage errors (exit 2): option values and arguments that are malformed, each named. What is wrong
// inside a file or with a service is a ValidationError or the service's own error (exit 1).
import { InvalidArgumentError } from "commander";
import { NAME_PATTERN } from "../../functions/core/capping/policy.ts";

/** An argument that cannot be used as given (a duplicate segment, a name with a path separator). */
export class UsageError extends Error {
  override name = "UsageError";
}

/** commander parser: an integer from `min` to `max`, or a usage error naming the option. */
export function integerIn(min: number, max: number): (text: string) => number {
  return (text) => {
    const value = /^[0-9]{1,16}$/.test(text) ? Number(text) : Number.NaN;
    if (!(value >= min && value <= max)) throw new InvalidArgumentError(`expected an integer from ${min} to ${max}`);
    return value;
  };
}

/** `<segment>=<file>` pairs: names as the policy allows them (so no path separators), each once. */
export function segmentFiles(pairs: readonly string[]): { name: string; file: string }[] {
  const seen = new Set<string>();
  return pairs.map((pair) => {
    const at = pair.indexOf("=");
    const [name, file] = at < 0 ? [pair, ""] : [pair.slice(0, at), pair.slice(at + 1)];
    if (!name || !file) throw new UsageError(`${pair}: expected <segment>=<file>`);
    if (!NAME_PATTERN.test(name))
      throw new UsageError(
        `${pair}: segment names are 1-64 of a-z, 0-9, "_" or "-" (the policy's rule), starting with a letter or digit`,
      );
    if (seen.has(name)) throw new UsageError(`${pair}: segment ${name} is given twice`);
    seen.add(name);
    return { name, file };
  });
}
