// An ObjectStore over a local directory: object key `segments/new.roaring` is `<root>/segments/new.roaring`.
import { readFile } from "node:fs/promises";
import { join, resolve, sep } from "node:path";
import { ObjectNotFoundError } from "../core/errors.ts";
import type { ObjectStore } from "../core/object-store.ts";

export class FileObjectStore implements ObjectStore {
  private readonly root: string;

  constructor(root: string) {
    this.root = resolve(root);
  }

  async get(key: string): Promise<Uint8Array> {
    const path = resolve(join(this.root, key));
    if (!path.startsWith(this.root + sep)) throw new ObjectNotFoundError(key);
    try {
      return new Uint8Array(await readFile(path));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") throw new ObjectNotFoundError(key, { cause: error });
      throw error;
    }
  }
}
