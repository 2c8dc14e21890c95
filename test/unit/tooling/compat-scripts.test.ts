// The previous releases' scripts in test/compat/ are what their release tag holds: each file's git blob id is
// the one test/compat/manifest.json records, and that blob is lua/<file> at the recorded commit and at the tag,
// where the clone has them (a fresh clone may have no tags; a shallow one, not the commit).
import { describe, expect, it } from "vitest";
import {
  blobIdOf,
  type CompatEntry,
  changedCopies,
  compatFiles,
  gitRevision,
  readCompatManifest,
  sourcesElsewhere,
  tagsElsewhere,
  unmarkedDerivations,
  withoutCompatLines,
} from "../../../scripts/compat-scripts.ts";

const { files } = readCompatManifest();

describe("the compat scripts (test/compat/manifest.json)", () => {
  it("lists every .lua file under test/compat/, once", () => {
    expect(files.map((entry) => entry.file).sort()).toEqual(compatFiles().sort());
  });

  it("each file's git blob id (as git hash-object computes it) is the one its entry records", () => {
    expect(changedCopies(files)).toEqual([]);
  });

  it("a derived file without its '-- compat:' lines is its source's recorded blob, byte for byte", () => {
    expect(files.filter((entry) => entry.sourceBlob !== undefined).length).toBeGreaterThan(0);
    expect(unmarkedDerivations(files)).toEqual([]);
  });

  it("each entry's source at its recorded commit has the recorded blob (checked where the clone has the commit)", () => {
    expect(sourcesElsewhere(files, (entry) => entry.commit)).toEqual([]);
  });

  it("each release tag the clone has points at the recorded commit, and its source there has the recorded blob (tags the clone lacks are not checked)", () => {
    expect(tagsElsewhere(files)).toEqual([]);
    expect(sourcesElsewhere(files, (entry) => `refs/tags/${entry.tag}`)).toEqual([]);
  });
});

describe("the compat checks catch what they forbid", () => {
  const entry: CompatEntry = { file: "v9/x.lua", tag: "v9", commit: "c1", source: "lua/x.lua", blob: "" };
  const text = "local a = 1\nreturn a\n";
  const copy = { ...entry, blob: blobIdOf(Buffer.from(text)) };

  it("a changed byte, and git's blob id for a known text", () => {
    expect(blobIdOf(Buffer.from("hello\n"))).toBe("ce013625030ba8dba906f756967f9e9ca394464a");
    expect(changedCopies([copy], () => Buffer.from(text))).toEqual([]);
    expect(changedCopies([copy], () => Buffer.from(text.replace("1", "2")))).toEqual(["v9/x.lua"]);
  });

  it("a carried-in line outside the markers, and marked lines removed", () => {
    const derived = { ...copy, sourceBlob: copy.blob };
    const marked = "-- compat: header\nlocal a = 1\n-- compat: carried in\nlocal b = 2\n-- compat: end\nreturn a\n";
    expect(withoutCompatLines(marked)).toBe(text);
    expect(unmarkedDerivations([derived], () => Buffer.from(marked))).toEqual([]);
    expect(unmarkedDerivations([derived], () => Buffer.from(marked.replace("-- compat: end\n", "")))).toEqual([
      "v9/x.lua",
    ]);
  });

  it("a source of another blob, a tag at another commit, and revisions the clone lacks skipped", () => {
    const revisions: Record<string, string> = { "c1:lua/x.lua": "other", "refs/tags/v9^{commit}": "c2" };
    const resolve = (rev: string) => revisions[rev];
    expect(sourcesElsewhere([copy], (e) => e.commit, resolve)).toEqual(["v9/x.lua"]);
    expect(sourcesElsewhere([{ ...copy, commit: "c3" }], (e) => e.commit, resolve)).toEqual([]);
    expect(tagsElsewhere([copy], resolve)).toEqual(["v9 c1"]);
    expect(tagsElsewhere([{ ...copy, tag: "v8" }], resolve)).toEqual([]);
    expect(gitRevision("refs/tags/no-such-tag-here")).toBeUndefined();
  });
});
