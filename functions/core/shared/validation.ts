// One way to run a zod schema at a boundary: the error names the field the way a user writes it
// (`segments[1].caps.push[0].window`), never a zod internals dump.
import type { z } from "zod";
import { ValidationError } from "./errors.ts";

export function formatPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const part of path) {
    if (typeof part === "number") out += `[${part}]`;
    else out += out ? `.${String(part)}` : String(part);
  }
  return out;
}

export function describeIssues(error: z.ZodError): { path: string; message: string }[] {
  return error.issues.map((issue) =>
    // a strict object's unknown field: name the field itself, not the object holding it
    issue.code === "unrecognized_keys"
      ? { path: formatPath([...issue.path, issue.keys[0] ?? ""]), message: "unknown field" }
      : { path: formatPath(issue.path), message: issue.message },
  );
}

/** Parses `value` or throws a ValidationError for the first problem, prefixed with `root` if given. */
export function parseOrThrow<S extends z.ZodType>(schema: S, value: unknown, root = ""): z.output<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const [first] = describeIssues(result.error);
  const path = [root, first?.path].filter(Boolean).join(first?.path.startsWith("[") ? "" : ".");
  throw new ValidationError(path, first?.message ?? "invalid", { cause: result.error });
}
