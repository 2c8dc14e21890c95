// Lua scripts kept in parts: an entry file whose `--- @include "part"` lines are each replaced by that part's
// text (BullMQ's convention), joined into the one chunk Redis loads. The service's loader, the SDK's direct
// transport, the Lambda bundle, the CLI, the benches and the tests all read scripts through this module.
// Node built-ins only: the published SDK carries it too.
import { existsSync, readFileSync } from "node:fs";
import { dirname, isAbsolute, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** An include line: the part's name, relative to the including file's folder, `.lua` implied. */
const INCLUDE = /^--- @include "([^"]+)"$/;
/** A line that means to include a part but is not written as one (it would be kept as a comment). */
const MISWRITTEN_INCLUDE = /^\s*--.*@include\b/;

/** A script that cannot be joined: a part missing, included twice or in a cycle, an include miswritten. */
export class LuaChunkError extends Error {
  override name = "LuaChunkError";
  /** The file (and line) at fault. */
  readonly at: string;
  constructor(at: string, message: string, options?: ErrorOptions) {
    super(`${at}: ${message}`, options);
    this.at = at;
  }
}

/** Where a line of a joined chunk is written: its file and its line there (1-based). */
export interface LineOrigin {
  readonly file: string;
  readonly line: number;
}

export interface JoinedChunk {
  /** The chunk: the entry's text with every include line replaced by its part's (joined) text. */
  readonly text: string;
  /** The files joined, the entry first, then each part where it is included. */
  readonly files: readonly string[];
  /** origins[i]: where line i + 1 of `text` is written. */
  readonly origins: readonly LineOrigin[];
}

const pathOf = (file: string | URL): string => (typeof file === "string" ? resolve(file) : fileURLToPath(file));

/** A path as errors show it: relative to the working folder when inside it. */
function shown(path: string): string {
  const inside = relative(process.cwd(), path);
  return inside === "" || inside.startsWith("..") || isAbsolute(inside) ? path : inside;
}

export interface JoinOptions {
  /**
   * Parts read from another file than the one beside the including file: part name (as the include line
   * writes it) -> its file. A build of a script with one part swapped (a test build) is joined like any other.
   */
  readonly parts?: Readonly<Record<string, string | URL>>;
}

/**
 * The chunk of the script whose entry file is `entry`. Each include line (`--- @include "name"`, the whole line
 * and its newline) is replaced by the text of `name`.lua in the including file's folder, itself joined first;
 * a part's text ends with a newline, so the lines after the include stay lines of their own. Each part is
 * included once: a part missing, included a second time or including itself (directly or not) is an error
 * naming the file and line, as is a line that mentions `@include` in any other form. `options.parts` names
 * parts read from elsewhere.
 */
export function joinLua(entry: string | URL, options: JoinOptions = {}): JoinedChunk {
  const swapped = options.parts ?? {};
  const files: string[] = [];
  const origins: LineOrigin[] = [];
  const pieces: string[] = [];
  const expand = (file: string, including: readonly string[]): void => {
    const text = readFileSync(file, "utf8");
    files.push(file);
    if (including.length > 0 && !text.endsWith("\n")) {
      throw new LuaChunkError(shown(file), "a part ends with a newline (its last line would run into the next)");
    }
    let line = 0;
    for (let start = 0; start < text.length; ) {
      const newline = text.indexOf("\n", start);
      const end = newline === -1 ? text.length : newline + 1;
      const content = text.slice(start, newline === -1 ? end : newline);
      const lineText = text.slice(start, end);
      start = end;
      line += 1;
      const at = `${shown(file)}:${line}`;
      const include = INCLUDE.exec(content);
      if (include === null) {
        if (MISWRITTEN_INCLUDE.test(content)) {
          throw new LuaChunkError(at, `an include is written exactly --- @include "part" (found: ${content.trim()})`);
        }
        pieces.push(lineText);
        origins.push({ file, line });
        continue;
      }
      const name = include[1] as string;
      const swap = Object.hasOwn(swapped, name) ? swapped[name] : undefined;
      const part =
        swap === undefined ? resolve(dirname(file), name.endsWith(".lua") ? name : `${name}.lua`) : pathOf(swap);
      const chain = [...including, file];
      if (chain.includes(part)) {
        const cycle = [...chain.slice(chain.indexOf(part)), part].map(shown).join(" -> ");
        throw new LuaChunkError(at, `include cycle: ${cycle}`);
      }
      if (files.includes(part)) throw new LuaChunkError(at, `part "${name}" is included a second time`);
      if (!existsSync(part)) throw new LuaChunkError(at, `part "${name}" not found (${shown(part)})`);
      expand(part, chain);
    }
  };
  expand(pathOf(entry), []);
  return { text: pieces.join(""), files, origins };
}

/**
 * The entry file of script `name` in the first of `dirs` that holds it: `<name>.lua` (one file, as the SDK
 * package carries a joined chunk) or `<name>/<name>.lua` (an entry beside its parts); undefined when none does.
 */
export function findLuaEntry(dirs: readonly URL[], name: string): string | undefined {
  for (const dir of dirs) {
    for (const candidate of [new URL(`${name}.lua`, dir), new URL(`${name}/${name}.lua`, dir)]) {
      if (existsSync(candidate)) return fileURLToPath(candidate);
    }
  }
  return undefined;
}

/** The joined chunk of script `name` from the first of `dirs` that holds it (findLuaEntry()). */
export function readLuaChunk(dirs: readonly URL[], name: string): string {
  const entry = findLuaEntry(dirs, name);
  if (entry === undefined) {
    throw new LuaChunkError(
      `lua/${name}.lua`,
      `not found as ${name}.lua or ${name}/${name}.lua in ${dirs.map((dir) => shown(fileURLToPath(dir))).join(", ")}`,
    );
  }
  return joinLua(entry).text;
}
