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
