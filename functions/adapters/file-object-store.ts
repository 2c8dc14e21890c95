// An ObjectStore over a local directory: object key `segments/new.roaring` is `<root>/segments/new.roaring`.
import { readFile, stat } from "node:fs/promises";
import { join, resolve, sep } from "node:path";
import { ObjectNotFoundError } from "../core/shared/errors.ts";
import type { ObjectHead, ObjectStore } from "../core/shared/object-store.ts";

export class FileObjectStore implements ObjectStore {
  private readonly root: string;

  constructor(root: string) {
    this.root = resolve(root);
  }

  get(key: string): Promise<Uint8Array> {
    return this.read(key, async (path) => new Uint8Array(await readFile(path)));
  }

  head(key: string): Promise<ObjectHead> {
    return this.read(key, async (path) => {
      const { mtimeMs, size } = await stat(path);
      return { etag: `${mtimeMs}-${size}`, modifiedAt: Math.floor(mtimeMs) };
    });
  }

  private async read<T>(key: string, action: (path: string) => Promise<T>): Promise<T> {
    const path = resolve(join(this.root, key));
    if (!path.startsWith(this.root + sep)) throw new ObjectNotFoundError(key);
    try {
      return await action(path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") throw new ObjectNotFoundError(key, { cause: error });
      throw error;
    }
  }
}
