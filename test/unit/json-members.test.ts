// Members named twice in one JSON object are found, with their path; JSON that JSON.stringify wrote (which
// cannot repeat a member) never is, whatever its strings hold.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { duplicateMember } from "../../functions/handlers/json-members.ts";

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
});
