// Reads a capping block (format 3, see the header of lua/cap-sends.lua) so tests can check what is stored.
import { decodeMulti } from "@msgpack/msgpack";

export interface Block {
  newest: number;
  compactAt: number;
  classLimit: number;
  identities: string[];
  events: { at: number; identity: string }[];
  classes: number[][];
  /** Each user's history as the identities of its sends, by offset in the block. */
  history(offset: number): string[];
}

export function decodeBlock(value: Buffer): Block {
  const [format, newest, compactAt, classLimit, identities, times, eventIdentities, classes, users] = [
    ...decodeMulti(value, { rawStrings: true }),
  ] as [number, number, number, number, Uint8Array[], number[], number[], Uint8Array[], Uint8Array];
  if (format !== 3) throw new Error(`unknown block format ${format}`);
  const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("latin1");
  const events = times.map((at, e) => ({
    at,
    identity: text(identities[(eventIdentities[e] as number) - 1] as Uint8Array),
  }));
  const decodedClasses = classes.map((bytes) =>
    Array.from({ length: bytes.length / 2 }, (_, i) => Buffer.from(bytes).readUInt16BE(2 * i)),
  );
  const classOf = (offset: number) => Buffer.from(users).readUInt16BE(2 * offset);
  return {
    newest,
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
