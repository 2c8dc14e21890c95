// The previous releases' Redis scripts in test/compat/: copies of lua/ at a release tag, listed with their
// source commit and git blob id in test/compat/manifest.json, so that a clone without tags can still check them.
//   tsx scripts/compat-scripts.ts write <tag> <file.lua>...   copy lua/<file> at <tag> to test/compat/<tag>/
//   tsx scripts/compat-scripts.ts check                       the manifest's checks (test/unit/tooling/compat-scripts.test.ts)
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { isMain } from "./is-main.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
export const COMPAT_DIR = join(root, "test", "compat");
const MANIFEST = join(COMPAT_DIR, "manifest.json");

export interface CompatEntry {
  /** the copy, relative to test/compat/ */
  file: string;
  /** the release whose source it is (an annotated tag) */
  tag: string;
  /** the commit the tag points at */
  commit: string;
  /** the source's path in the repository at that commit */
  source: string;
  /** the copy's git blob id */
  blob: string;
  /** a derived copy: its source's blob id, which the copy equals without its "-- compat:" lines */
  sourceBlob?: string;
  carriedFrom?: string;
  note?: string;
}
export interface CompatManifest {
  about: string;
  files: CompatEntry[];
}

export const readCompatManifest = (): CompatManifest => JSON.parse(readFileSync(MANIFEST, "utf8")) as CompatManifest;

/** The id `git hash-object` gives these bytes. */
export const blobIdOf = (bytes: Uint8Array): string =>
  createHash("sha1").update(`blob ${bytes.length}\0`).update(bytes).digest("hex");

/** A derived copy without its "-- compat:" header lines and the carried-in blocks between its markers. */
export function withoutCompatLines(text: string): string {
  const kept: string[] = [];
  let carried = false;
  for (const line of text.split("\n")) {
    const trimmed = line.trim();
    if (trimmed.startsWith("-- compat: carried in")) carried = true;
    else if (trimmed === "-- compat: end") carried = false;
    else if (!carried && !trimmed.startsWith("-- compat:")) kept.push(line);
  }
  return kept.join("\n");
}

/** `git rev-parse --verify <rev>`, or undefined where the clone does not have it (no tag, a shallow clone). */
export function gitRevision(rev: string): string | undefined {
  try {
    return execFileSync("git", ["rev-parse", "-q", "--verify", rev], {
      cwd: root,
      encoding: "utf8",
      stdio: "pipe",
    }).trim();
  } catch {
    return undefined;
  }
}

export const compatFiles = (dir = COMPAT_DIR): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? compatFiles(join(dir, entry.name))
      : entry.name.endsWith(".lua")
        ? [relative(COMPAT_DIR, join(dir, entry.name))]
        : [],
  );

const bytesOf = (entry: CompatEntry) => readFileSync(join(COMPAT_DIR, entry.file));
/** The blob the source had at the release: the copy's own, or for a derived copy its sourceBlob. */
const releasedBlob = (entry: CompatEntry) => entry.sourceBlob ?? entry.blob;

/** Copies whose bytes are not the blob the manifest records. */
export const changedCopies = (entries: readonly CompatEntry[], read = bytesOf) =>
  entries.filter((entry) => blobIdOf(read(entry)) !== entry.blob).map((entry) => entry.file);

/** Derived copies that, without their "-- compat:" lines, are not their source's blob. */
export const unmarkedDerivations = (entries: readonly CompatEntry[], read = bytesOf) =>
  entries
    .filter((entry) => entry.sourceBlob !== undefined)
    .filter((entry) => blobIdOf(Buffer.from(withoutCompatLines(read(entry).toString("utf8")))) !== entry.sourceBlob)
    .map((entry) => entry.file);

/** Entries whose source at `rev(entry)` is another blob; revisions the clone does not have are skipped. */
export function sourcesElsewhere(
  entries: readonly CompatEntry[],
  rev: (entry: CompatEntry) => string,
  resolve = gitRevision,
): string[] {
  return entries
    .filter((entry) => {
      const blob = resolve(`${rev(entry)}:${entry.source}`);
      return blob !== undefined && blob !== releasedBlob(entry);
    })
    .map((entry) => entry.file);
}

/** Tags the clone has that point at another commit than the manifest records. */
export function tagsElsewhere(entries: readonly CompatEntry[], resolve = gitRevision): string[] {
  const tags = [...new Set(entries.map((entry) => `${entry.tag} ${entry.commit}`))];
  return tags.filter((pair) => {
    const [tag, commit] = pair.split(" ") as [string, string];
    const at = resolve(`refs/tags/${tag}^{commit}`);
    return at !== undefined && at !== commit;
  });
}

function write(tag: string, names: readonly string[]): void {
  const commit = gitRevision(`refs/tags/${tag}^{commit}`);
  if (commit === undefined) throw new Error(`no tag ${tag} in this clone (git fetch --tags)`);
  const manifest = readCompatManifest();
  for (const name of names) {
    const source = `lua/${name}`;
    const bytes = execFileSync("git", ["show", `${commit}:${source}`], { cwd: root });
    const file = `${tag}/${name}`;
    mkdirSync(dirname(join(COMPAT_DIR, file)), { recursive: true });
    writeFileSync(join(COMPAT_DIR, file), bytes);
    const entry: CompatEntry = { file, tag, commit, source, blob: blobIdOf(bytes) };
    const at = manifest.files.findIndex((other) => other.file === file);
    if (at === -1) manifest.files.push(entry);
    else manifest.files[at] = entry;
    console.log(`${file} <- ${tag}:${source} (${entry.blob})`);
  }
  writeFileSync(MANIFEST, `${JSON.stringify(manifest, null, 2)}\n`);
}

function check(): boolean {
  const { files } = readCompatManifest();
  const listed = new Set(files.map((entry) => entry.file));
  const problems = {
    unlisted: compatFiles().filter((file) => !listed.has(file)),
    changed: changedCopies(files),
    unmarked: unmarkedDerivations(files),
    otherSourceAtCommit: sourcesElsewhere(files, (entry) => entry.commit),
    otherSourceAtTag: sourcesElsewhere(files, (entry) => `refs/tags/${entry.tag}`),
    tagsElsewhere: tagsElsewhere(files),
  };
  console.log(JSON.stringify(problems, null, 2));
  return Object.values(problems).every((list) => list.length === 0);
}

if (isMain(import.meta)) {
  const [command, tag, ...names] = process.argv.slice(2);
  if (command === "write" && tag !== undefined && names.length > 0) write(tag, names);
  else if (command === "check") process.exitCode = check() ? 0 : 1;
  else {
    console.error("usage: compat-scripts.ts write <tag> <file.lua>... | check");
    process.exitCode = 2;
  }
}
