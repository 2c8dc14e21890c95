// Reads what lua/cap-sends.lua stores (a page block, format 4, and a user record) so tests can check it.
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
  if (format !== 4) throw new Error(`unknown block format ${format}`);
  const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("latin1");
  const events = times.map((at, e) => ({
    at,
    identity: text(identities[(eventIdentities[e] as number) - 1] as Uint8Array),
  }));
  const decodedClasses = classes.map((bytes) =>
    Array.from({ length: bytes.length / width }, (_, i) => Buffer.from(bytes).readUIntBE(width * i, width)),
  );
  const classOf = (offset: number) => Buffer.from(users).readUInt16BE(2 * offset);
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

/** A user record: its sends as (time, identity number). */
export function decodeRecord(value: Buffer): { at: number; identityNumber: number }[] {
  const sends: { at: number; identityNumber: number }[] = [];
  let position = 0;
  while (position < value.length) {
    const at = value.readUIntBE(position, 6);
    position += 6;
    let number = 0;
    let scale = 1;
    for (;;) {
      const b = value[position++] as number;
      number += (b % 128) * scale;
      if (b < 128) break;
      scale *= 128;
    }
    sends.push({ at, identityNumber: number });
  }
  return sends;
}
