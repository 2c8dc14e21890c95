// The store epoch of caps and limits (docs/decisions/0091-store-epoch-per-hash-slot.md): whether the counter
// store still holds the state it was given. Initialising the store writes an epoch key in every hash slot
// (Redis) and then a marker object beside the policy (S3): a marker means every slot was written, so a slot
// without its key lost its state since. Scripts check their slot's key in the call that counts; a loss comes
// back as StoreLostError, and the policy's `onStoreLoss` says what follows.
import { hashSlotOf, storeEpochKey } from "../../../sdk/src/protocol/index.ts";
import type { Clock } from "./clock.ts";
import { StoreLostError, StoreUnavailableError, WriteConflictError } from "./errors.ts";
import type { ConditionalObjectStore } from "./object-store.ts";

/** What a caller does on a lost slot: `pause` (refuse, count nothing, until acknowledged) or `continue`. */
export const STORE_LOSS_POLICIES = ["pause", "continue"] as const;
export type OnStoreLoss = (typeof STORE_LOSS_POLICIES)[number];
/** The safe choice: nobody is sent again as if new without an operator's say. */
export const DEFAULT_ON_STORE_LOSS: OnStoreLoss = "pause";

/** The EMF metric counted once per slot a process finds lost (namespace Tollgate, no dimensions). */
export const STORE_LOST_METRIC = "StoreLost";

/** The marker object (in the rules bucket): the store was initialised, with this epoch. */
export interface StoreEpochMarker {
  namespace: string;
  /** When the store was initialised (ms since the epoch, the initialiser's clock): the value of every epoch key. */
  epoch: number;
  initialisedAt: string;
}

/** The marker's object key for the keys of `namespace`. */
export const storeEpochObjectKey = (namespace: string): string => `store/epoch-${namespace}.json`;

/** The Redis side: the epoch keys (sdk/src/protocol/keys-store-epoch.ts). */
export interface StoreEpochSlots {
  /** Writes the epoch key of every slot that has none (SET NX); resolves with the slots written. */
  initialise(namespace: string, epoch: number): Promise<number[]>;
  /** Writes the epoch key of one slot if it has none. */
  initialiseSlot(namespace: string, slot: number, epoch: number): Promise<void>;
  /** Which of `slots` have no epoch key. */
  missing(namespace: string, slots: readonly number[]): Promise<number[]>;
}

/** The slots GET /v1/health looks at: every 256th (64, about 21 on each of three primaries). */
export const PROBED_SLOTS: readonly number[] = Array.from({ length: 64 }, (_, i) => i * 256);

export interface StoreInitialisation {
  marker: StoreEpochMarker;
  /** Whether this call wrote the marker (the store had never been initialised). */
  created: boolean;
  /** The slots whose epoch key this call wrote: every slot for a new store, the lost ones after a loss. */
  slotsWritten: number[];
}

function parseMarker(body: Uint8Array, key: string): StoreEpochMarker {
  const marker = JSON.parse(Buffer.from(body).toString("utf8")) as Partial<StoreEpochMarker>;
  if (typeof marker.epoch !== "number" || typeof marker.namespace !== "string") {
    throw new Error(`${key}: not a store epoch marker`);
  }
  return marker as StoreEpochMarker;
}

/** The marker of `namespace`, or undefined when the store was never initialised. */
export async function readStoreEpoch(
  objects: ConditionalObjectStore,
  namespace: string,
): Promise<StoreEpochMarker | undefined> {
  const key = storeEpochObjectKey(namespace);
  const found = await objects.read(key);
  return found ? parseMarker(found.body, key) : undefined;
}

/**
 * Initialises the store, or acknowledges a loss (`tollgate store acknowledge`): every slot without an epoch
 * key gets one, then the marker is written if there was none. The keys come first, so a marker is only ever
 * seen once every slot holds its key; two initialisers at once write the same keys, and the second marker
 * write is refused (compare-and-set) and the first one's read back.
 */
export async function initialiseStore(
  objects: ConditionalObjectStore,
  slots: StoreEpochSlots,
  namespace: string,
  clock: Clock,
): Promise<StoreInitialisation> {
  const found = await readStoreEpoch(objects, namespace);
  if (found) return { marker: found, created: false, slotsWritten: await slots.initialise(namespace, found.epoch) };
  const epoch = clock.now();
  const marker: StoreEpochMarker = { namespace, epoch, initialisedAt: new Date(epoch).toISOString() };
  const slotsWritten = await slots.initialise(namespace, epoch);
  try {
    await objects.putIf(storeEpochObjectKey(namespace), JSON.stringify(marker), undefined);
    return { marker, created: true, slotsWritten };
  } catch (error) {
    if (!(error instanceof WriteConflictError)) throw error;
    const winner = await readStoreEpoch(objects, namespace);
    if (!winner) throw error;
    return { marker: winner, created: false, slotsWritten };
  }
}

/** A slot found lost by this process, as health reports it. */
export interface SlotLoss {
  slot: number;
  /** When this process first and last found it lost (ms). */
  firstSeenAt: number;
  lastSeenAt: number;
}

/** What this process knows of the store epoch (GET /v1/health). */
export interface StoreEpochStatus {
  epoch?: number;
  initialisedAt?: string;
  /** The policy applied on the last loss. */
  onStoreLoss?: OnStoreLoss;
  /** Slots found lost and not yet seen answering again (under `pause`: until acknowledged). */
  lostSlots: SlotLoss[];
  /** Slots found lost since this process started, acknowledged or continued since included. */
  slotsLostSinceStart: number;
  /** When this process first found a slot lost (ISO), if it did. */
  firstLossAt?: string;
}

export interface StoreEpochGuardOptions {
  objects: ConditionalObjectStore;
  slots: StoreEpochSlots;
  /** The deployment's key namespace (tenants' keys are in its slots too: one epoch per slot). */
  namespace: string;
  clock: Clock;
  /** The policy's `onStoreLoss`, read when a loss is found. */
  onStoreLoss: () => Promise<OnStoreLoss>;
  /** Told once per slot this process finds lost (log it and count STORE_LOST_METRIC). */
  onLoss?: (loss: { slot: number; epochKey: string; epoch: number; onStoreLoss: OnStoreLoss }) => void;
}

/**
 * Runs the calls of caps and limits with their slot's epoch key. The marker is read once (open(), at cold
 * start); a store never initialised is initialised then. A call that finds its slot lost counts nothing and
 * rejects with StoreLostError under `pause`; under `continue` the slot's key is written again and the call
 * sent once more, counting against the empty state.
 */
export class StoreEpochGuard {
  private marker?: StoreEpochMarker;
  private opening?: Promise<StoreEpochMarker>;
  private readonly lost = new Map<number, SlotLoss>();
  private seen = 0;
  private firstLossAt?: number;
  private lastPolicy?: OnStoreLoss;

  constructor(private readonly options: StoreEpochGuardOptions) {}

  /** The marker, read (or the store initialised) on the first call; a failure is tried again next time. */
  open(): Promise<StoreEpochMarker> {
    if (this.marker) return Promise.resolve(this.marker);
    if (!this.opening) {
      const { objects, slots, namespace, clock } = this.options;
      this.opening = readStoreEpoch(objects, namespace)
        .then((found) => found ?? initialiseStore(objects, slots, namespace, clock).then((done) => done.marker))
        .then(
          (marker) => {
            this.marker = marker;
            return marker;
          },
          (error) => {
            this.opening = undefined;
            throw error;
          },
        );
    }
    return this.opening;
  }

  /**
   * `call` with the epoch key of `key`'s slot (declared beside `key` in the same script call); `slot`, that
   * slot when the caller has it already (hashed once per check, not once per layer).
   */
  run<T>(key: string, call: (epochKey: string) => Promise<T>, slot = hashSlotOf(key)): Promise<T> {
    if (!this.marker) {
      // nothing was sent: the call waits for the marker, and fails as "not run" without it
      return this.open().then(
        () => this.run(key, call, slot),
        (error: unknown) => {
          throw new StoreUnavailableError(`the store epoch is not known yet: ${(error as Error).message}`, {
            cause: error,
            mayHaveRun: false,
          });
        },
      );
    }
    const epochKey = storeEpochKey(this.options.namespace, slot);
    const result = call(epochKey).catch((error: unknown) => this.onError(error, epochKey, call));
    // a slot found lost is reported until a call on it is answered again (after acknowledge)
    return this.lost.size === 0 ? result : result.then((value) => this.answered(epochKey, value));
  }

  /**
   * Of `keys`, those whose slot this process found lost and still finds lost under `pause`, each with its
   * StoreLostError (a batch fails them before it counts anything). Resolves at once, with none, while no slot
   * is known lost; otherwise one EXISTS per known-lost slot of `keys`, and a slot that holds its key again
   * (acknowledged) is cleared. Under `continue` none: each call writes its slot's key again itself.
   */
  async stillLost(keys: readonly string[]): Promise<Map<string, StoreLostError>> {
    const found = new Map<string, StoreLostError>();
    const known = this.lost.size === 0 ? [] : keys.filter((key) => this.lost.has(hashSlotOf(key)));
    if (known.length === 0 || !this.marker) return found;
    const { slots, namespace } = this.options;
    const candidates = [...new Set(known.map(hashSlotOf))];
    const missing = new Set(await slots.missing(namespace, candidates));
    for (const slot of candidates) if (!missing.has(slot)) this.lost.delete(slot);
    if (missing.size === 0) return found;
    const onStoreLoss = await this.options.onStoreLoss().catch(() => DEFAULT_ON_STORE_LOSS);
    this.lastPolicy = onStoreLoss;
    if (onStoreLoss !== "pause") return found;
    for (const key of known) {
      const slot = hashSlotOf(key);
      if (!missing.has(slot)) continue;
      const epochKey = storeEpochKey(namespace, slot);
      this.record(slot, epochKey, this.marker.epoch, onStoreLoss);
      found.set(key, new StoreLostError(epochKey, slot));
    }
    return found;
  }

  /**
   * Looks at PROBED_SLOTS (GET /v1/health): a FLUSHALL or a primary replaced empty shows there even in an
   * environment that has not called on a lost slot yet, and the slots found lost before. Lost ones are
   * recorded as a call would record them; those that hold their key again (acknowledged) are cleared. Resolves with the probed slots found lost.
   */
  async probe(): Promise<number[]> {
    const marker = await this.open();
    const { slots, namespace } = this.options;
    // the sample, and every slot found lost before (cleared here once it holds its key again)
    const probed = [...new Set([...PROBED_SLOTS, ...this.lost.keys()])];
    const missing = await slots.missing(namespace, probed);
    const lost = new Set(missing);
    for (const slot of probed) if (!lost.has(slot)) this.lost.delete(slot);
    if (missing.length > 0) {
      const onStoreLoss = await this.options.onStoreLoss().catch(() => DEFAULT_ON_STORE_LOSS);
      this.lastPolicy = onStoreLoss;
      for (const slot of missing) this.record(slot, storeEpochKey(namespace, slot), marker.epoch, onStoreLoss);
    }
    return missing;
  }

  status(): StoreEpochStatus {
    return {
      ...(this.marker ? { epoch: this.marker.epoch, initialisedAt: this.marker.initialisedAt } : {}),
      ...(this.lastPolicy ? { onStoreLoss: this.lastPolicy } : {}),
      lostSlots: [...this.lost.values()].sort((a, b) => a.slot - b.slot),
      slotsLostSinceStart: this.seen,
      ...(this.firstLossAt !== undefined ? { firstLossAt: new Date(this.firstLossAt).toISOString() } : {}),
    };
  }

  private answered<T>(epochKey: string, value: T): T {
    this.lost.delete(hashSlotOf(epochKey));
    return value;
  }

  /** A slot found lost: noted (when and how often), and told once until it answers again. */
  private record(slot: number, epochKey: string, epoch: number, onStoreLoss: OnStoreLoss): void {
    const now = this.options.clock.now();
    const known = this.lost.get(slot);
    if (known) {
      known.lastSeenAt = now;
      return;
    }
    this.lost.set(slot, { slot, firstSeenAt: now, lastSeenAt: now });
    this.seen += 1;
    this.firstLossAt ??= now;
    this.options.onLoss?.({ slot, epochKey, epoch, onStoreLoss });
  }

  private async onError<T>(error: unknown, epochKey: string, call: (epochKey: string) => Promise<T>): Promise<T> {
    if (!(error instanceof StoreLostError)) throw error;
    const { clock, slots, namespace } = this.options;
    const now = clock.now();
    const onStoreLoss = await this.options.onStoreLoss().catch(() => DEFAULT_ON_STORE_LOSS);
    this.lastPolicy = onStoreLoss;
    this.record(error.slot, epochKey, this.marker?.epoch ?? now, onStoreLoss);
    if (onStoreLoss === "pause") throw error;
    await slots.initialiseSlot(namespace, error.slot, this.marker?.epoch ?? now);
    this.lost.delete(error.slot);
    return call(epochKey);
  }
}
