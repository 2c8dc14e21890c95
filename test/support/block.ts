// Reads what lua/cap-sends/ stores (a page block, format 6, 5 or 4, and a user record) so tests can check it.
import { decodeMulti } from "@msgpack/msgpack";
import type { Redis } from "ioredis";
import { capBlobKey, capRecordKey, capTagOf, recordRangeOf } from "../../sdk/src/protocol/index.ts";

export interface Block {
  width: number;
  compactAt: number;
  classLimit: number;
  identities: string[];
  events: { at: number; identity: string }[];
  classes: number[][];
  /** Each user's history as the identities of its sends, by offset in the page. */
  history(offset: number): string[];
}

export function decodeBlock(value: Buffer): Block {
  const [format, width, compactAt, classLimit, identities, times, eventIdentities, classes, users] = [
    ...decodeMulti(value, { rawStrings: true }),
  ] as [number, number, number, number, Uint8Array[], number[], number[], Uint8Array[], Uint8Array];
  if (format !== 6 && format !== 5 && format !== 4) throw new Error(`unknown block format ${format}`);
  const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("latin1");
  const events = times.map((at, e) => ({
    at,
    identity: text(identities[(eventIdentities[e] as number) - 1] as Uint8Array),
  }));
  const decodedClasses = classes.map((bytes) =>
    Array.from({ length: bytes.length / width }, (_, i) => Buffer.from(bytes).readUIntBE(width * i, width)),
  );
  const classOf = (offset: number) => classNumberOf(users, offset);
  return {
    width,
    compactAt,
    classLimit,
    identities: identities.map(text),
    events,
    classes: decodedClasses,
    history: (offset) => {
      const c = classOf(offset);
      return c === 0
        ? []
        : (decodedClasses[c - 1] as number[]).map((e) => (events[e - 1] as { identity: string }).identity);
    },
  };
}

/** Bits per user of a page's class numbers by the length of their bytes (format 6 stores the narrowest width). */
const CLASS_BITS: Record<number, number> = { 512: 16, 256: 8, 128: 4, 64: 2, 32: 1 };

/** The class number of the user at `offset` of a block's class bytes (2 bytes alone: every user's). */
export function classNumberOf(users: Uint8Array, offset: number): number {
  const bytes = Buffer.from(users);
  if (bytes.length === 2) return bytes.readUInt16BE(0);
  const bits = CLASS_BITS[bytes.length];
  if (bits === undefined) throw new Error(`no class width for ${bytes.length} bytes`);
  if (bits === 16) return bytes.readUInt16BE(2 * offset);
  if (bits === 8) return bytes[offset] as number;
  const perByte = 8 / bits;
  const byte = bytes[Math.floor(offset / perByte)] as number;
  // the first user of a byte in its high bits
  return (byte >> (8 - bits * ((offset % perByte) + 1))) & ((1 << bits) - 1);
}

export interface RecordSend {
  at: number;
  identityNumber: number;
  /** "window": kept for the user's windows; "tail": an older send kept for idempotency (read for windows only after a policy change). */
  part: "window" | "tail";
}

/** A user record (format 2, or the varint format before it): its sends, window part (by time) then tail. */
export function decodeRecord(value: Buffer): RecordSend[] {
  const sends: RecordSend[] = [];
  let position = 0;
  const varint = () => {
    let number = 0;
    let scale = 1;
    for (;;) {
      const b = value[position++] as number;
      number += (b % 128) * scale;
      if (b < 128) return number;
      scale *= 128;
    }
  };
  const header = value[0] as number;
  if (header < 128) {
    // the format before: 6-byte time + varint number each, in write order
    while (position < value.length) {
      const at = value.readUIntBE(position, 6);
      position += 6;
      sends.push({ at, identityNumber: varint(), part: "window" });
    }
    return sends;
  }
  const numberWidth = ((header - 128) >> 3) + 1;
  const width = header % 8;
  position = 1;
  const windowCount = width > 0 ? varint() : (value.length - 1) / (6 + numberWidth);
  for (let i = 0; i < windowCount; i++) {
    sends.push({
      at: value.readUIntBE(position, 6),
      identityNumber: value.readUIntBE(position + 6, numberWidth),
      part: "window",
    });
    position += 6 + numberWidth;
  }
  if (width > 0) {
    const count = varint();
    let at = value.readUIntBE(position, 6);
    position += 18; // first, last and newest time
    const ids = position;
    position += count * width;
    for (let i = 0; i < count; i++) {
      if (i > 0) {
        const zigzag = varint();
        at += zigzag % 2 === 0 ? zigzag / 2 : -(zigzag + 1) / 2;
      }
      sends.push({ at, identityNumber: value.readUIntBE(ids + i * width, width), part: "tail" });
    }
  }
  return sends;
}

/** The record blob of a range (lua/cap-sends/ "Record blobs"): its users ascending and each one's record. */
export function decodeRecordBlob(value: Buffer): Map<number, Buffer> {
  if (value[0] !== 1) throw new Error(`not a record blob: format ${value[0]}`);
  const users = value.readUIntBE(1, 3);
  const classes = value.readUIntBE(4, 3);
  const classNumbers = 10 + 4 * users;
  const ends = classNumbers + 3 * users;
  const data = ends + 4 * classes;
  const endOf = (c: number) => (c === 0 ? 0 : value.readUInt32BE(ends + 4 * (c - 1)));
  const records = new Map<number, Buffer>();
  for (let i = 0; i < users; i++) {
    const c = value.readUIntBE(classNumbers + 3 * i, 3);
    records.set(value.readUInt32BE(10 + 4 * i), value.subarray(data + endOf(c - 1), data + endOf(c)));
  }
  return records;
}

/** The key of the blob (or blob part) that holds `user` in range `blobKey`, read through its directory. */
export async function blobPartKey(redis: Pick<Redis, "getBuffer">, blobKey: string, user: number): Promise<string> {
  const value = await redis.getBuffer(blobKey);
  if (value?.[0] !== 2) return blobKey;
  let lowest = 0;
  for (let q = 1; q < value.length; q += 4) if (value.readUInt32BE(q) <= user) lowest = value.readUInt32BE(q);
  return `${blobKey}:${lowest}`;
}

/** A user's record wherever the script keeps it: its range's blob (through a directory), else its range's hash. */
export async function readUserRecord(
  redis: Pick<Redis, "getBuffer" | "hgetBuffer">,
  namespace: string,
  user: number,
): Promise<Buffer | null> {
  const blobKey = capBlobKey(namespace, capTagOf(user), recordRangeOf(user));
  const part = await redis.getBuffer(await blobPartKey(redis, blobKey, user));
  const inBlob = part ? decodeRecordBlob(part).get(user) : undefined;
  if (inBlob) return inBlob;
  return redis.hgetBuffer(capRecordKey(namespace, capTagOf(user), recordRangeOf(user)), String(user));
}
