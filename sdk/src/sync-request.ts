// A slot group's sync request on the instance's side: what it carries for each key (approximate usage in
// epochs, strict spends per grant with their ages, refunds, demand and the tokens asked for), and how a
// request the store may not have applied gives its usage back to its keys. The engine (engine.ts) calls
// these from its sync side, never from `check`.
import {
  MAX_EPOCHS_PER_KEY,
  MAX_KEYS_PER_SYNC,
  MAX_SYNC_BODY_BYTES,
  type SyncEntry,
  type SyncRequest,
} from "./protocol/index.ts";
import { type GroupState, type PendingRequest, type QuotaHandle, Source } from "./state.ts";
import { mergeSpent, tokensWanted } from "./strict-grants.ts";

/** What a request takes from the engine. */
export interface RequestContext {
  readonly instanceId: string;
  readonly syncIntervalMs: number;
}

/**
 * The request for one slot group: the unacknowledged one again if there is one (same seq, same
 * entries), else a new one with every key that has something to say. Undefined: nothing to send.
 */
export function takeRequest(
  context: RequestContext,
  group: GroupState,
  now: number,
  mono = now,
): SyncRequest | undefined {
  if (group.pending) return group.pending.request;
  const rule = group.rule;
  if (now < rule.missingUntil) return undefined;
  const entries: SyncEntry[] = [];
  const handles: QuotaHandle[] = [];
  const strict = rule.definition?.mode === "strict";
  const leaseMs = rule.definition?.leaseMs ?? 0;
  const elapsedMs = group.lastSentAt < 0 ? 0 : now - group.lastSentAt;
  const seq = group.seq + 1;
  // the body's size as the HTTP transport sends it (JSON, UTF-8): the envelope, then each entry and a comma
  let bytes = Buffer.byteLength(
    JSON.stringify({
      instanceId: context.instanceId,
      rule: rule.name,
      group: group.index,
      seq,
      configVersion: rule.configVersion,
      entries: [],
    }),
  );
  for (const handle of group.handles) {
    if (entries.length === MAX_KEYS_PER_SYNC) break;
    // a demand estimate: at most what the wire carries
    const offered = Math.min(handle.used + handle.denied + handle.waiting, Number.MAX_SAFE_INTEGER);
    if (handle.waiting > 0) handle.onDemand = true;
    const rate = handle.rate;
    if (elapsedMs > 0) handle.rate = 0.5 * rate + (0.5 * offered) / elapsedMs;
    // approximate: the requests waiting for this reply (`decide`), which the store grants before any share
    const want = strict
      ? now >= handle.denyUntil
        ? tokensWanted(handle, offered, leaseMs, elapsedMs, context.syncIntervalMs)
        : 0
      : handle.waiting;
    const quiet =
      offered === 0 &&
      handle.epochs.length === 0 &&
      handle.refunds.length === 0 &&
      handle.spent.length === 0 &&
      want === 0;
    // a key never assigned asks for its first allowance even before it has traffic (resolve + sync warms it)
    if (quiet && !(handle.source === Source.None && handle.assignedAt < 0)) continue;
    const entry: SyncEntry = { key: handle.key, usage: [], refunds: [], offered, want };
    if (!strict) {
      // the epochs kept while the store was away and this interval's usage, within what one entry carries
      const used = Math.min(handle.used, Number.MAX_SAFE_INTEGER);
      const epochs = used > 0 ? [...handle.epochs, now, used] : handle.epochs;
      capEpochs(epochs, MAX_EPOCHS_PER_KEY);
      for (let i = 0; i < epochs.length; i += 2) entry.usage.push([epochs[i] as number, epochs[i + 1] as number]);
    } else {
      // strict: tokens spent since the last report, per grant and stamp: the store counts them over W from
      // its now less their age (floored: a later stamp, never an earlier one)
      mergeSpent(handle.spent, MAX_EPOCHS_PER_KEY);
      let stamped = false;
      const ages: number[] = [];
      for (let i = 0; i < handle.spent.length; i += 3) {
        entry.usage.push([handle.spent[i] as number, handle.spent[i + 1] as number]);
        const age = Math.max(0, Math.floor(mono - (handle.spent[i + 2] as number)));
        ages.push(age);
        if (age > 0) stamped = true;
      }
      if (stamped) entry.spentAgo = ages;
    }
    for (let i = 0; i < handle.refunds.length; i += 2)
      entry.refunds.push([handle.refunds[i] as number, handle.refunds[i + 1] as number]);
    // a key that would take the body past the route's limit waits for the next request (the keys sent
    // go to the back of the group, so every key gets its turn)
    const size = Buffer.byteLength(JSON.stringify(entry)) + 1;
    if (entries.length > 0 && bytes + size > MAX_SYNC_BODY_BYTES) {
      handle.rate = rate; // its offered count keeps growing until it is sent: measured then
      break;
    }
    bytes += size;
    handle.epochs = [];
    handle.refunds = [];
    handle.spent = [];
    handle.used = 0;
    handle.denied = 0;
    handle.waiting = 0;
    entries.push(entry);
    handles.push(handle);
  }
  // a rule `ready()` waits for asks for its definition even before it has a key (group 0, no entries)
  if (entries.length === 0 && !(rule.awaited && !rule.known && group.index === 0)) return undefined;
  for (const handle of handles) {
    group.handles.delete(handle);
    group.handles.add(handle);
  }
  group.seq = seq;
  const request: SyncRequest = {
    instanceId: context.instanceId,
    rule: rule.name,
    group: group.index,
    seq,
    configVersion: rule.configVersion,
    entries,
  };
  group.lastSentAt = now;
  group.pending = { request, handles, strict, mono };
  return request;
}

/** Usage admitted and not yet in any request the store acknowledged. */
export function unreported(handle: QuotaHandle): number {
  let sum = handle.used;
  for (let i = 1; i < handle.epochs.length; i += 2) sum += handle.epochs[i] as number;
  return sum;
}

/**
 * Gives a request's usage back to its keys, to go out again under a new sequence number. `counted`: the
 * store may have applied it (an error reply, an unanswered request given up): approximate usage goes out
 * again (counting it twice only over-counts), strict spent tokens and refunds are dropped (taken off their
 * grant twice they could over-admit; dropped, the store counts the grant until its lease ends).
 */
export function restore(pending: PendingRequest, counted: boolean): void {
  const { request, handles, strict, mono } = pending;
  request.entries.forEach((entry, i) => {
    const handle = handles[i];
    if (!handle) return;
    if (!strict) handle.epochs = capEpochs([...entry.usage.flat(), ...handle.epochs], MAX_EPOCHS_PER_KEY);
    else if (!counted) {
      // each pair's stamp again from its age (floored when sent: the same stamp or a later one)
      const back = entry.usage.flatMap(([grantedAt, count], j) => [
        grantedAt,
        count,
        mono - (entry.spentAgo?.[j] ?? 0),
      ]);
      handle.spent = [...back, ...handle.spent];
    }
    if (!counted) handle.refunds = [...entry.refunds.flat(), ...handle.refunds];
  });
}

/**
 * Keeps at most `most` [at, count] pairs in `epochs` (oldest first): the two oldest merge at the later
 * time, counted later, so never early out of a window, and nothing is dropped. Returns `epochs`.
 */
export function capEpochs(epochs: number[], most: number): number[] {
  while (epochs.length > 2 * most) {
    // at most what the wire carries (past 2^53 units, an admission of `allow` would freeze the group)
    const count = Math.min((epochs[1] as number) + (epochs[3] as number), Number.MAX_SAFE_INTEGER);
    epochs.splice(0, 4, epochs[2] as number, count);
  }
  return epochs;
}
