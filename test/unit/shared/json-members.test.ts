// Members named twice in one JSON object are found, with their path; JSON that JSON.stringify wrote (which
// cannot repeat a member) never is, whatever its strings hold.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { duplicateMember, repeatedMember } from "../../../functions/handlers/json-members.ts";

/** `object` as JSON with `name` written a second time as its last member. */
const withRepeat = (object: Record<string, unknown>, name: string) =>
  `${JSON.stringify(object).slice(0, -1)},${JSON.stringify(name)}:null}`;

describe("duplicateMember", () => {
  it("finds nothing in JSON that JSON.stringify wrote, quotes, escapes and nesting included", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(duplicateMember(JSON.stringify(value))).toBeUndefined();
      }),
      { numRuns: 300 },
    );
  });

  it("names a repeated member by its path, at the top and inside arrays of objects", () => {
    const names = fc.string({ minLength: 1, maxLength: 8 });
    fc.assert(
      fc.property(fc.dictionary(names, fc.jsonValue(), { minKeys: 1, maxKeys: 5 }), fc.nat(), (object, pick) => {
        const keys = Object.keys(object);
        fc.pre(keys.length > 0);
        const name = keys[pick % keys.length] as string;
        expect(duplicateMember(withRepeat(object, name))).toBe(name);
        const nested = `{"scope":"s","limits":[{"key":"a"},${withRepeat(object, name)}]}`;
        expect(duplicateMember(nested)).toBe(`limits[1].${name}`);
      }),
      { numRuns: 300 },
    );
  });

  it("treats an escaped name as the name it spells, and the same name in two objects as no repeat", () => {
    expect(duplicateMember('{"key":"a","\\u006bey":"b"}')).toBe("key");
    expect(duplicateMember('{"a":{"key":1},"b":{"key":2},"key":3}')).toBeUndefined();
    expect(duplicateMember('{"a":"\\"key\\":","key":1}')).toBeUndefined();
  });

  it("counts before it scans: repeatedMember answers as duplicateMember does, on any JSON and any repeat", () => {
    const repeatedIn = (text: string) => repeatedMember(text, JSON.parse(text));
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(repeatedIn(JSON.stringify(value))).toBeUndefined();
        expect(repeatedIn(JSON.stringify(value, null, 2))).toBeUndefined();
      }),
      { numRuns: 300 },
    );
    const names = fc.string({ minLength: 1, maxLength: 8 });
    fc.assert(
      fc.property(fc.dictionary(names, fc.jsonValue(), { minKeys: 1, maxKeys: 5 }), fc.nat(), (object, pick) => {
        const keys = Object.keys(object);
        const name = keys[pick % keys.length] as string;
        expect(repeatedIn(withRepeat(object, name))).toBe(name);
        const nested = `{"scope":"s","limits":[{"key":"a"},${withRepeat(object, name)}]}`;
        expect(repeatedIn(nested)).toBe(`limits[1].${name}`);
      }),
      { numRuns: 300 },
    );
    expect(repeatedIn('{"key":"a","\\u006bey":"b"}')).toBe("key");
    expect(repeatedIn('{"__proto__":1,"__proto__":2}')).toBe("__proto__");
    expect(repeatedIn('{"a" :1, "b":{"c":[{"d":1},{"d":2}]},\n"a"\t: 2}')).toBe("a");
    expect(repeatedIn('{"a":":","b":"\\":"}')).toBeUndefined();
  });
});
