// The store epoch's keys (docs/decisions/0091-store-epoch-per-hash-slot.md): one key per Redis Cluster hash
// slot, all 16,384 written when the store is initialised, none with a lifetime. A cap or limit script
// declares the key of its own slot beside its state and refuses to count when it is missing: the slot's
// state was lost (FLUSHALL, a node replaced empty) since the store was initialised.
//   <ns>:se:{<tag>}   the epoch key of the slot <tag> hashes to (storeEpochTagOf): the epoch, as text
// Each slot's tag is the first of "0", "1", ... (base 36) that hashes there, so a key of any tag has the
// epoch key of its slot, and both can be declared in one script call (Redis Cluster compares slots, not tags).
import { checkName } from "./keys.ts";

/** The error reply's code of a script that found its slot's epoch key missing: "STORELOST <epoch key>". */
export const STORE_LOST_REPLY = "STORELOST";

/** Redis Cluster's hash slots. */
export const HASH_SLOTS = 16_384;

/** CRC16-CCITT (XModem), Redis Cluster's key hash, byte at a time from a table. */
const CRC_TABLE = (() => {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let crc = i << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    table[i] = crc;
  }
  return table;
})();

function crc16(bytes: Uint8Array, start: number, end: number): number {
  let crc = 0;
  for (let i = start; i < end; i++)
    crc = ((crc << 8) ^ (CRC_TABLE[((crc >> 8) ^ (bytes[i] as number)) & 0xff] as number)) & 0xffff;
  return crc;
}

/** The hash slot of `key`, as Redis Cluster finds it: its hash tag's (the text inside the first non-empty {...}) or the whole key's. */
export function hashSlotOf(key: string): number {
  // the braces found in the string are the bytes' braces: no UTF-8 sequence of another character holds 0x7b
  // or 0x7d, so the tag is the same text either way
  const open = key.indexOf("{");
  if (open !== -1) {
    const close = key.indexOf("}", open + 1);
    if (close > open + 1) return slotOfText(key, open + 1, close);
  }
  return slotOfText(key, 0, key.length);
}

/**
 * The slot of the hashed text `key[start, end)`. ASCII text (every tag the builders make of ASCII names) is
 * its own UTF-8: hashed from the string, without a buffer per call, and only the hashed text is scanned
 * for other characters (this runs for every check), not the namespace and algorithm around the tag.
 */
function slotOfText(key: string, start: number, end: number): number {
  for (let i = start; i < end; i++) if (key.charCodeAt(i) > 0x7f) return utf8SlotOf(key);
  return crc16Ascii(key, start, end) % HASH_SLOTS;
}

function utf8SlotOf(key: string): number {
  const bytes = Buffer.from(key, "utf8");
  const open = bytes.indexOf(0x7b);
  if (open !== -1) {
    const close = bytes.indexOf(0x7d, open + 1);
    if (close > open + 1) return crc16(bytes, open + 1, close) % HASH_SLOTS;
  }
  return crc16(bytes, 0, bytes.length) % HASH_SLOTS;
}

/** crc16 of the characters of an ASCII string (each its one UTF-8 byte). */
function crc16Ascii(text: string, start: number, end: number): number {
  let crc = 0;
  for (let i = start; i < end; i++)
    crc = ((crc << 8) ^ (CRC_TABLE[((crc >> 8) ^ text.charCodeAt(i)) & 0xff] as number)) & 0xffff;
  return crc;
}

let tagsBySlot: string[] | undefined;

/** The tag of slot `slot`'s epoch key: the first base-36 number whose text hashes to it (found once, ~170,000 hashes). */
export function storeEpochTagOf(slot: number): string {
  if (!Number.isInteger(slot) || slot < 0 || slot >= HASH_SLOTS) throw new RangeError(`no hash slot ${slot}`);
  if (tagsBySlot === undefined) {
    const tags = new Array<string>(HASH_SLOTS);
    let found = 0;
    for (let n = 0; found < HASH_SLOTS; n++) {
      const tag = n.toString(36);
      const at = crc16(Buffer.from(tag, "latin1"), 0, tag.length) % HASH_SLOTS;
      if (tags[at] === undefined) {
        tags[at] = tag;
        found++;
      }
    }
    tagsBySlot = tags;
  }
  return tagsBySlot[slot] as string;
}

/** The epoch key of hash slot `slot` in `namespace`. */
export function storeEpochKey(namespace: string, slot: number): string {
  return `${namespace}:se:{${storeEpochTagOf(slot)}}`;
}

/** Whether `key` is an epoch key (of any namespace): one sits in every hash slot once the store is initialised. */
export function isStoreEpochKey(key: string): boolean {
  return /:se:\{[^}]+\}$/.test(key);
}

/** The epoch key of the slot that `key` (a cap or limit key of any namespace) lives in. */
export function storeEpochKeyFor(namespace: string, key: string): string {
  return storeEpochKey(namespace, hashSlotOf(key));
}

/** Every epoch key of `namespace`, slot 0 first: what initialising the store (or acknowledging a loss) writes. */
export function storeEpochKeys(namespace: string): string[] {
  checkName("namespace", namespace);
  return Array.from({ length: HASH_SLOTS }, (_, slot) => storeEpochKey(namespace, slot));
}
