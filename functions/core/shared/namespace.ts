// The key namespace (KEY_NAMESPACE) every key of a deployment starts with, checked where a capper or a
// limiter takes it in: a ValidationError, like any other input of the service that cannot work.
import { NAME_PATTERN, NAME_RULE } from "../../../sdk/src/protocol/index.ts";
import { ValidationError } from "./errors.ts";

export function checkNamespace(namespace: string): string {
  if (!NAME_PATTERN.test(namespace)) throw new ValidationError("namespace", NAME_RULE);
  return namespace;
}
