// True when the module is the script Node was started with (not imported by another module or a test).
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";

export function isMain(meta: ImportMeta): boolean {
  return process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(meta.url);
}
