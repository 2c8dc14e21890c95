// The wire protocol of lua/cap-sends.lua (its header is the contract): which keys and arguments a batch
// becomes, one call per slot group, and what the reply bytes and the "+log" text mean. The Capper never
// sees an argument position, a profile byte or a reply code.
import { BLOCKS_PER_GROUP, blockInGroupOf, capBlockKey, groupOf, offsetInBlockOf } from "../shared/keys.ts";
import type { DecisionKind } from "./decisions.ts";
import type { Policy } from "./policy.ts";

/** What the capper needs from the counter store: run lua/cap-sends.lua on the keys of one slot group. */
export interface CapStore {
  capSends(keys: readonly string[], args: readonly (string | Buffer)[]): Promise<Buffer>;
}

/** The script always takes every block key of a group: a fixed key count lets ioredis route by the first. */
export const CAP_SENDS_KEYS = BLOCKS_PER_GROUP;

/** The profile byte of a send counted without checking caps (an exempt send that counts). */
const FORCED_PROFILE = 255;
const REPLY_ALLOWED = 0;
const REPLY_DUPLICATE = 1;
const REPLY_EXEMPT = 2;
/** 3 + i: capped by cap i of the user's profile. */
const REPLY_FIRST_CAP = 3;
const EMPTY = Buffer.alloc(0);

export interface CapSendsRequest {
  namespace: string;
  at: number;
  /** "count" records the allowed sends; "peek" decides the same way and writes nothing. */
  mode: "count" | "peek";
  /** Also return the user's log as the call left it (for one user: the frequency check). */
  withLog: boolean;
  horizonMs: number;
  channel: string;
  /** Empty: the sends have no identity, so none is ever a duplicate. */
  campaignId: string;
  /** capsArgument(policy, channel). */
  caps: string;
  /** User IDs ascending (repeats allowed: each is decided once) and each one's segment, in step. */
  sortedIds: Uint32Array;
  segmentOf: Uint8Array;
  /** Count every send without checking caps (exempt sends that count). */
  forced: boolean;
}

/** One send in a user's log: when it was counted and its identity ("<channel>:<campaign ID>"). */
export interface LoggedSend {
  at: number;
  identity: string;
}

/** The caps argument: every segment's caps for `channel`, in segment order (a segment is a profile). */
export function capsArgument(policy: Policy, channel: string): string {
  return policy.segments
    .map((_, segment) =>
      policy
        .capsFor(segment, channel)
        .map((cap) => `${cap.windowMs}:${cap.max}:${cap.channel === channel ? 0 : 1}`)
        .join(","),
    )
    .join("|");
}

/**
 * Each sorted user's verdict as the script replied (a repeated ID takes the reply of its first
 * occurrence: read it through the capper's repeat rule).
 */
export class Verdicts {
  private constructor(private readonly codes: Uint8Array) {}

  /** Every user exempt, without a script call (exempt sends that do not count). */
  static allExempt(users: number): Verdicts {
    return new Verdicts(new Uint8Array(users).fill(REPLY_EXEMPT));
  }

  /** For the script's replies only. */
  static of(codes: Uint8Array): Verdicts {
    return new Verdicts(codes);
  }

  decision(user: number): DecisionKind {
    const code = this.codes[user] as number;
    if (code === REPLY_ALLOWED) return "allowed";
    if (code === REPLY_DUPLICATE) return "duplicate";
    if (code === REPLY_EXEMPT) return "exempt";
    return "capped";
  }

  /** For a capped user: which cap denied it, as an index into `policy.capsFor(segment, channel)`. */
  capIndex(user: number): number {
    return (this.codes[user] as number) - REPLY_FIRST_CAP;
  }
}

interface ScriptCall {
  keys: string[];
  args: (string | Buffer)[];
  /** Indices into the sorted arrays, in the order of the script's reply bytes. */
  members: number[];
}

/** Runs the script for every slot group of the batch, all calls in flight at once, and decodes the replies. */
export async function runCapSends(
  store: CapStore,
  request: CapSendsRequest,
): Promise<{ verdicts: Verdicts; log: LoggedSend[] }> {
  const calls = planCalls(request);
  const common = [
    String(request.at),
    request.withLog ? `${request.mode}+log` : request.mode,
    String(request.horizonMs),
    `${request.channel}:${request.campaignId}`,
    request.caps,
  ];
  const replies = await Promise.all(calls.map((call) => store.capSends(call.keys, [...common, ...call.args])));
  // a repeated ID is sent once; its later occurrences keep 0 here and follow the first (Verdicts)
  const codes = new Uint8Array(request.sortedIds.length);
  let log = "";
  replies.forEach((reply, c) => {
    const { members } = calls[c] as ScriptCall;
    if (request.withLog ? reply.length < members.length : reply.length !== members.length) {
      throw new Error(`cap-sends replied ${reply.length} bytes for ${members.length} users`);
    }
    for (let m = 0; m < members.length; m++) codes[members[m] as number] = reply[m] as number;
    if (request.withLog) log += reply.subarray(members.length).toString("latin1");
  });
  return { verdicts: Verdicts.of(codes), log: parseLog(log) };
}

/** One script call per slot group: every block key of the group, and per block 2 bytes per distinct user. */
function planCalls({ namespace, sortedIds, segmentOf, forced }: CapSendsRequest): ScriptCall[] {
  const calls: ScriptCall[] = [];
  let i = 0;
  while (i < sortedIds.length) {
    const group = groupOf(sortedIds[i] as number);
    const call: ScriptCall = { keys: [], args: new Array(BLOCKS_PER_GROUP).fill(EMPTY), members: [] };
    for (let block = 0; block < BLOCKS_PER_GROUP; block++) call.keys.push(capBlockKey(namespace, group, block));
    while (i < sortedIds.length && groupOf(sortedIds[i] as number) === group) {
      const block = blockInGroupOf(sortedIds[i] as number);
      let end = i;
      while (
        end < sortedIds.length &&
        groupOf(sortedIds[end] as number) === group &&
        blockInGroupOf(sortedIds[end] as number) === block
      )
        end++;
      const users = Buffer.allocUnsafe(2 * (end - i));
      let length = 0;
      for (let j = i; j < end; j++) {
        if (j > i && sortedIds[j] === sortedIds[j - 1]) continue; // a repeated ID is decided once
        users[length++] = offsetInBlockOf(sortedIds[j] as number);
        users[length++] = forced ? FORCED_PROFILE : (segmentOf[j] as number);
        call.members.push(j);
      }
      call.args[block] = users.subarray(0, length);
      i = end;
    }
    calls.push(call);
  }
  return calls;
}

/** The "+log" text: a line "<time ms> <identity>\n" per send. */
function parseLog(text: string): LoggedSend[] {
  return text
    .split("\n")
    .filter(Boolean)
    .map((line) => {
      const space = line.indexOf(" ");
      return { at: Number(line.slice(0, space)), identity: line.slice(space + 1) };
    });
}
