// An ObjectStore over a local directory: object key `segments/new.roaring` is `<root>/segments/new.roaring`.
// Its conditional writes (the policy's compare-and-set) hold a lock file made with O_EXCL while they compare
// and replace the file, so two processes editing one directory never both win.
import { createHash, randomBytes } from "node:crypto";
import { mkdir, open, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { dirname, join, resolve, sep } from "node:path";
import { ObjectNotFoundError, WriteConflictError } from "../core/shared/errors.ts";
import type { ConditionalObjectStore, ObjectHead, ObjectStore, TaggedObject } from "../core/shared/object-store.ts";

/** A lock older than this was left by a writer that died; it is taken over. */
const STALE_LOCK_MS = 30_000;

export class FileObjectStore implements ObjectStore, ConditionalObjectStore {
  private readonly root: string;

  constructor(root: string) {
    this.root = resolve(root);
  }

  get(key: string): Promise<Uint8Array> {
    return this.readWith(key, async (path) => new Uint8Array(await readFile(path)));
  }

  head(key: string): Promise<ObjectHead> {
    return this.readWith(key, async (path) => {
      const { mtimeMs, size } = await stat(path);
      return { etag: `${mtimeMs}-${size}`, modifiedAt: Math.floor(mtimeMs) };
    });
  }

  /** The bytes and their tag: a hash of the content (a file's mtime and size can repeat for another content). */
  async read(key: string): Promise<TaggedObject | undefined> {
    try {
      const body = await this.get(key);
      return { body, etag: contentTag(body) };
    } catch (error) {
      if (error instanceof ObjectNotFoundError) return undefined;
      throw error;
    }
  }

  async putIf(key: string, body: string, expected: string | undefined): Promise<string> {
    const path = this.pathOf(key);
    await mkdir(dirname(path), { recursive: true });
    const lock = `${path}.lock`;
    await takeLock(lock, key);
    try {
      const current = await this.read(key);
      if (current?.etag !== expected) throw new WriteConflictError(key, "changed since it was read");
      // written beside it, then renamed over it: a reader sees the old file or the new one, never a part
      const temporary = `${path}.${randomBytes(6).toString("hex")}.tmp`;
      await writeFile(temporary, body);
      await rename(temporary, path);
      return contentTag(new TextEncoder().encode(body));
    } finally {
      await rm(lock, { force: true });
    }
  }

  private pathOf(key: string): string {
    const path = resolve(join(this.root, key));
    if (!path.startsWith(this.root + sep)) throw new ObjectNotFoundError(key);
    return path;
  }

  private async readWith<T>(key: string, action: (path: string) => Promise<T>): Promise<T> {
    const path = this.pathOf(key);
    try {
      return await action(path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") throw new ObjectNotFoundError(key, { cause: error });
      throw error;
    }
  }
}

function contentTag(body: Uint8Array): string {
  return `"${createHash("sha256").update(body).digest("hex").slice(0, 32)}"`;
}

/** Another writer holding the lock is a conflict like a changed object: the edit reads again and retries. */
async function takeLock(lock: string, key: string): Promise<void> {
  try {
    await (await open(lock, "wx")).close();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    const age = Date.now() - (await stat(lock).catch(() => ({ mtimeMs: Date.now() }))).mtimeMs;
    if (age < STALE_LOCK_MS) throw new WriteConflictError(key, "another write to it is in progress", { cause: error });
    await rm(lock, { force: true });
    await (await open(lock, "wx")).close();
  }
}
