// Reads what lua/cap-sends.lua stores (a page block, format 5 or 4, and a user record) so tests can check it.
import { decodeMulti } from "@msgpack/msgpack";

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
  if (format !== 5 && format !== 4) throw new Error(`unknown block format ${format}`);
  const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("latin1");
  const events = times.map((at, e) => ({
    at,
    identity: text(identities[(eventIdentities[e] as number) - 1] as Uint8Array),
  }));
  const decodedClasses = classes.map((bytes) =>
    Array.from({ length: bytes.length / width }, (_, i) => Buffer.from(bytes).readUIntBE(width * i, width)),
  );
  // format 5: 2 bytes alone when every user of the page has that class
  const classOf = (offset: number) => Buffer.from(users).readUInt16BE(users.length === 2 ? 0 : 2 * offset);
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
