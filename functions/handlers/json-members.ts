// Finds a member named twice in one JSON object: JSON.parse keeps the last silently, so `{"key": "a",
// "key": "b"}` would be decided as "b" while a proxy or a log reads "a". A request body is refused instead.

interface Frame {
  /** The members seen so far, for an object; undefined for an array. */
  names: Set<string> | undefined;
  path: string;
  /** The member being read (object) or the element's index (array). */
  name: string;
  index: number;
  expectName: boolean;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;

/**
 * The member named twice in `text`, as `duplicateMember` finds it, where `parsed` is what JSON.parse made of
 * `text`. It runs on every request body, so it first counts: every object that JSON.parse made holds at
 * most as many members as its text names, and fewer exactly when a name is repeated, so when the names in
 * the text are as many as the members of every object parsed, none is repeated. Only a body where they
 * differ is scanned for the path of the repeat (which builds strings and sets the count does not).
 */
export function repeatedMember(text: string, parsed: unknown): string | undefined {
  return namesIn(text) === membersIn(parsed) ? undefined : duplicateMember(text);
}

/** The member names in JSON text: the strings followed by a colon (a value never is). */
function namesIn(text: string): number {
  let names = 0;
  for (let i = 0; i < text.length; i++) {
    if (text.charCodeAt(i) !== QUOTE) continue;
    let end = i + 1;
    for (; text.charCodeAt(end) !== QUOTE; end++) if (text.charCodeAt(end) === BACKSLASH) end++;
    i = end;
    // JSON whitespace: space, tab, line feed, carriage return
    let next = text.charCodeAt(++end);
    while (next === 0x20 || next === 0x09 || next === 0x0a || next === 0x0d) next = text.charCodeAt(++end);
    if (next === COLON) names++;
  }
  return names;
}

/** The members of every object in a parsed JSON value, nested ones included (iterative: any depth). */
function membersIn(value: unknown): number {
  let members = 0;
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const item = pending.pop();
    if (typeof item !== "object" || item === null) continue;
    if (Array.isArray(item)) {
      for (const element of item) if (typeof element === "object" && element !== null) pending.push(element);
      continue;
    }
    // own names, "__proto__" included (JSON.parse makes it an own member like any other)
    for (const name of Object.keys(item)) {
      members++;
      const member = (item as Record<string, unknown>)[name];
      if (typeof member === "object" && member !== null) pending.push(member);
    }
  }
  return members;
}

const member = (path: string, name: string) => (path ? `${path}.${name}` : name);

/**
 * The path (`limits[1].key`) of the first member named twice in its object, or undefined. `text` must be
 * JSON that JSON.parse accepted: the scan trusts its structure and only follows strings, braces, brackets
 * and commas.
 */
export function duplicateMember(text: string): string | undefined {
  const stack: Frame[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      let end = i + 1;
      let escaped = false;
      for (; text.charCodeAt(end) !== QUOTE; end++) {
        if (text.charCodeAt(end) === BACKSLASH) {
          escaped = true;
          end++;
        }
      }
      const top = stack.at(-1);
      if (top?.names && top.expectName) {
        // "k" and "\u006b" name the same member
        const name = escaped ? (JSON.parse(text.slice(i, end + 1)) as string) : text.slice(i + 1, end);
        if (top.names.has(name)) return member(top.path, name);
        top.names.add(name);
        top.name = name;
        top.expectName = false;
      }
      i = end;
    } else if (c === 0x7b || c === 0x5b) {
      const parent = stack.at(-1);
      const path =
        parent === undefined ? "" : parent.names ? member(parent.path, parent.name) : `${parent.path}[${parent.index}]`;
      stack.push({ names: c === 0x7b ? new Set() : undefined, path, name: "", index: 0, expectName: c === 0x7b });
    } else if (c === 0x7d || c === 0x5d) {
      stack.pop();
    } else if (c === 0x2c) {
      const top = stack.at(-1);
      if (top?.names) top.expectName = true;
      else if (top) top.index++;
    }
  }
  return undefined;
}
