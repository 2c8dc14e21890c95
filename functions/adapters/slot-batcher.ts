// Calls that share a hash slot, joined: an execution environment that runs several invocations at once
// (Lambda Managed Instances) sends a slot's first call once the event loop's turn has run the callbacks it
// had ready (setImmediate), with the calls for its slot that they made, and the calls arriving while it runs
// go together as the next call, in the order they came. No timer: a call waits only for the rest of the
// turn it was made in, or for the call before it on its slot to be answered (decision 0175).

/** What the joined call answers for one of its items: its result, or the error that item alone met. */
export type Settled<Result> = { ok: true; value: Result } | { ok: false; error: unknown };

interface Waiting<Item, Result> {
  item: Item;
  resolve: (value: Result) => void;
  reject: (error: unknown) => void;
}

export interface SlotBatcherOptions<Item, Result> {
  /** One item alone: the call it would make without batching. */
  one: (item: Item) => Promise<Result>;
  /**
   * Several items of one slot in one call, answered each in order as if each ran alone after the one before;
   * a rejection is every item's (the call as a whole failed: not run, no answer, or an error reply).
   */
  many: (items: readonly Item[]) => Promise<readonly Settled<Result>[]>;
  /** The most items one call carries; more waiting go in the calls after it, in order. */
  maxPerCall: number;
}

/**
 * One call in flight per hash slot at a time: each slot's calls run one after another in the order they
 * were asked for, so the store applies them in that order (as if each ran alone, serially).
 */
export class SlotBatcher<Item, Result> {
  /** A slot is here while a call on it is in flight, with the items waiting for the next call. */
  private readonly slots = new Map<number, Waiting<Item, Result>[]>();

  constructor(private readonly options: SlotBatcherOptions<Item, Result>) {
    if (!Number.isInteger(options.maxPerCall) || options.maxPerCall < 1)
      throw new RangeError(`maxPerCall: expected an integer of at least 1, got ${options.maxPerCall}`);
  }

  /** The calls in flight (slots with one), for tests and metrics. */
  get inFlight(): number {
    return this.slots.size;
  }

  run(slot: number, item: Item): Promise<Result> {
    const waiting = this.slots.get(slot);
    if (waiting !== undefined) return new Promise((resolve, reject) => waiting.push({ item, resolve, reject }));
    // no call on the slot: this one goes after the turn's other ready callbacks (the requests of the other
    // connections read in the same poll), with the calls they make for the slot; sent at once, it went alone
    // and the next call took the rest, twice the script calls per check under load
    const first: Waiting<Item, Result>[] = [];
    this.slots.set(slot, first);
    setImmediate(() => this.next(slot));
    return new Promise((resolve, reject) => first.push({ item, resolve, reject }));
  }

  /** When the slot's first items are due, and after each call on it settled: the items waiting go as one call, or the slot is free again. */
  private next(slot: number): void {
    const waiting = this.slots.get(slot) as Waiting<Item, Result>[];
    if (waiting.length === 0) {
      this.slots.delete(slot);
      return;
    }
    const taken = waiting.splice(0, this.options.maxPerCall);
    if (taken.length === 1) {
      this.alone(slot, taken[0] as Waiting<Item, Result>);
      return;
    }
    const settle = (results: readonly Settled<Result>[]) => {
      if (results.length !== taken.length)
        throw new Error(`a joined call answered ${results.length} items, not ${taken.length}`);
      results.forEach((result, i) => {
        const { resolve, reject } = taken[i] as Waiting<Item, Result>;
        if (result.ok) resolve(result.value);
        else reject(result.error);
      });
    };
    const failAll = (error: unknown) => {
      for (const { reject } of taken) reject(error);
    };
    let call: Promise<readonly Settled<Result>[]>;
    try {
      call = this.options.many(taken.map(({ item }) => item));
    } catch (error) {
      call = Promise.reject(error);
    }
    call
      .then(settle)
      .catch(failAll)
      .finally(() => this.next(slot));
  }

  /** An item with no other for its slot: the call it would make without batching, its answer its own. */
  private alone(slot: number, { item, resolve, reject }: Waiting<Item, Result>): void {
    let call: Promise<Result>;
    try {
      call = this.options.one(item);
    } catch (error) {
      call = Promise.reject(error);
    }
    call.then(
      (value) => {
        resolve(value);
        this.next(slot);
      },
      (error: unknown) => {
        reject(error);
        this.next(slot);
      },
    );
  }
}
