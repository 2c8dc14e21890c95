// The top-level locals of a Lua 5.1 chunk, read from its tokens: Lua allows a function 200 active locals
// (LUAI_MAXVARS), and a chunk's top level is a function whose locals stay active to its end. Locals inside a
// block (a function, do, if, for, while, repeat) end with it and are not counted.

/** The names a chunk declares `local` at its top level, in order (`local function f` is one, `local a, b` two). */
export function topLevelLocals(chunk: string): string[] {
  const words = wordsOf(chunk);
  const names: string[] = [];
  let depth = 0;
  for (let i = 0; i < words.length; i++) {
    const word = words[i];
    if (word === "function" || word === "do" || word === "if" || word === "repeat") depth += 1;
    else if (word === "end" || word === "until") depth -= 1;
    else if (word === "local" && depth === 0) {
      if (words[i + 1] === "function") {
        names.push(words[i + 2] ?? "");
        continue;
      }
      // local a, b, c [= ...]: a name, then more after each comma
      for (let k = i + 1; k < words.length; k += 2) {
        names.push(words[k] ?? "");
        if (words[k + 1] !== ",") break;
      }
    }
  }
  return names;
}

const NAME = /[A-Za-z_][A-Za-z0-9_]*/y;
const NUMBER = /(?:0[xX][0-9A-Fa-f]*|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)/y;
const LONG_BRACKET = /\[(=*)\[/y;

/** The chunk's tokens in order: names and keywords as written, a string or number as "", a symbol as its first character; comments left out. */
function wordsOf(chunk: string): string[] {
  const words: string[] = [];
  const match = (pattern: RegExp, at: number): RegExpExecArray | null => {
    pattern.lastIndex = at;
    return pattern.exec(chunk);
  };
  const closeLong = (at: number, level: string): number => {
    const close = chunk.indexOf(`]${level}]`, at);
    if (close === -1) throw new Error(`an unclosed long bracket at ${at}`);
    return close + level.length + 2;
  };
  let i = 0;
  while (i < chunk.length) {
    const c = chunk[i] as string;
    if (/\s/.test(c)) {
      i += 1;
    } else if (chunk.startsWith("--", i)) {
      const long = match(LONG_BRACKET, i + 2);
      if (long) i = closeLong(i + 2 + long[0].length, long[1] as string);
      else {
        const newline = chunk.indexOf("\n", i);
        i = newline === -1 ? chunk.length : newline + 1;
      }
    } else if (c === "'" || c === '"') {
      let k = i + 1;
      while (k < chunk.length && chunk[k] !== c) k += chunk[k] === "\\" ? 2 : 1;
      words.push("");
      i = k + 1;
    } else if (c === "[" && match(LONG_BRACKET, i)) {
      const long = match(LONG_BRACKET, i) as RegExpExecArray;
      words.push("");
      i = closeLong(i + long[0].length, long[1] as string);
    } else if (match(NAME, i)) {
      const name = (match(NAME, i) as RegExpExecArray)[0];
      words.push(name);
      i += name.length;
    } else if (/[0-9.]/.test(c) && match(NUMBER, i)) {
      words.push("");
      i += (match(NUMBER, i) as RegExpExecArray)[0].length;
    } else {
      words.push(c);
      i += 1;
    }
  }
  return words;
}
