// What the property tests of cap-sends share: the script before a change run by EVAL beside the current one
// (a rolling deploy runs both on the same keys), and one call through the protocol module and the real
// script, its decisions in the model's terms.
import { readFileSync } from "node:fs";
import type { RedisCapStore, TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import {
  planCapSends,
  REPLY_ALLOWED,
  REPLY_DUPLICATE,
  REPLY_EXEMPT,
  REPLY_FIRST_CAP,
  readCapSendsReply,
  scriptProfiles,
} from "../../functions/core/capping/cap-sends-script.ts";
import { keptHorizonMs, type Policy } from "../../functions/core/capping/policy.ts";
import { evalScriptOf } from "../../sdk/src/protocol/index.ts";
import type { ModelCall, ModelDecision } from "./capping-model.ts";

/** How long the tests keep a named send to recognise a redelivery (the consumer's redelivery bound). */
export const REDELIVERY_MS = 10 * 60_000;

export type CapSendsCall = (keys: readonly string[], args: readonly (string | Buffer)[]) => Promise<Buffer>;

/** A user ID from its 4 bytes, most significant first. */
export function idOf(b0: number, b1: number, b2: number, b3: number): number {
  return ((b0 * 256 + b1) * 256 + b2) * 256 + b3;
}

/**
 * The script before the change (test/compat/v0.2.0/cap-sends.lua, v0.2.0's lua/cap-sends.lua) as an EVAL command defined on
 * `cluster` under `name`; its arguments are the current script's with page arguments (asPageArgs()).
 */
export function previousScript(cluster: TollgateCluster, name: string): CapSendsCall {
  const source = readFileSync(new URL("../compat/v0.2.0/cap-sends.lua", import.meta.url), "utf8");
  cluster.defineCommand(name, { numberOfKeys: 1, lua: evalScriptOf(source) });
  const command = (cluster as unknown as Record<string, (...keysAndArgs: (string | Buffer)[]) => Promise<Buffer>>)[
    `${name}Buffer`
  ] as (...keysAndArgs: (string | Buffer)[]) => Promise<Buffer>;
  return (keys, args) => command.call(cluster, ...keys, ...args);
}

/**
 * A call's arguments with its ranges' users (a sparse call's format: ARGV[11 + r] is range r's users, their
 * IDs then their profiles) made page arguments, the format the previous script takes: the same users, pages
 * and order, so its reply reads the same. Other arguments are returned as they are.
 */
export function asPageArgs(args: readonly (string | Buffer)[]): (string | Buffer)[] {
  const users = args.slice(11) as Buffer[];
  if (users.length === 0 || users[0]?.[1] !== 2) return [...args];
  const pages: Buffer[] = [];
  for (const arg of users) {
    const m = (arg.length - 2) / 5;
    let page = -1;
    let pairs: number[] = [];
    const flush = () => {
      if (page < 0) return;
      const spec = Buffer.alloc(5 + pairs.length);
      spec[0] = arg[0] as number;
      spec.writeUIntBE(page, 2, 3);
      Buffer.from(pairs).copy(spec, 5);
      pages.push(spec);
    };
    for (let i = 0; i < m; i++) {
      const id = arg.readUInt32BE(2 + 4 * i);
      if (Math.floor(id / 256) !== page) {
        flush();
        page = Math.floor(id / 256);
        pairs = [];
      }
      pairs.push(id % 256, arg[2 + 4 * m + i] as number);
    }
    flush();
  }
  return [...args.slice(0, 11), ...pages];
}

/** A reply code of cap-sends as the model's decision. */
export function decisionOf(code: number): ModelDecision {
  return code === REPLY_ALLOWED
    ? "allowed"
    : code === REPLY_DUPLICATE
      ? "duplicate"
      : code === REPLY_EXEMPT
        ? "exempt"
        : { capped: code - REPLY_FIRST_CAP };
}

export interface Step extends ModelCall {
  withWindows: boolean;
  /** Run by the script before the change (a rollout: both versions on the same keys). */
  byPrevious?: boolean;
  /** Let a record reaching 1,024 sends become a hot user's (format 3; Capper's hotRecords). */
  hotRecords?: boolean;
  /** Write page blocks with their class numbers at the narrowest width (format 6; Capper's compactClasses). */
  compactClasses?: boolean;
}

/** One call (or a check) through the protocol module and the real script; decisions in the call's user order. */
export async function runScript(
  scripts: { store: RedisCapStore; previous: CapSendsCall },
  namespace: string,
  policy: Policy,
  segmentOf: (user: number) => number,
  call: Step,
  blobSplitBytes: number | undefined,
  parallel = false,
): Promise<ModelDecision[]> {
  // the caller may pass users unsorted and repeated: planCapSends takes them sorted, a repeat once
  const sortedIds = Uint32Array.from(call.users).sort();
  const calls = planCapSends({
    namespace,
    now: call.now,
    at: call.at,
    mode: call.mode,
    ...(call.withWindows ? { withWindows: true } : {}),
    ...(call.hotRecords ? { hotRecords: true } : {}),
    ...(call.compactClasses ? { compactClasses: true } : {}),
    channel: call.channel,
    campaignId: call.campaignId,
    forced: call.exemptCounted,
    horizonMs: keptHorizonMs(policy, REDELIVERY_MS),
    profiles: scriptProfiles(policy, call.channel, REDELIVERY_MS),
    sortedIds,
    segmentOf: Uint8Array.from(sortedIds, segmentOf),
    ...(blobSplitBytes === undefined ? {} : { blobSplitBytes }),
  });
  const byUser = new Map<number, ModelDecision>();
  const run = (keys: readonly string[], args: readonly (string | Buffer)[]) =>
    call.byPrevious ? scripts.previous(keys, asPageArgs(args)) : scripts.store.capSends(keys, args);
  const replies = parallel ? await Promise.all(calls.map((planned) => run(planned.keys, planned.args))) : [];
  for (const [c, planned] of calls.entries()) {
    const reply = parallel ? (replies[c] as Buffer) : await run(planned.keys, planned.args);
    const { codes } = readCapSendsReply(reply, planned.members.length);
    planned.members.forEach((member, m) => {
      byUser.set(sortedIds[member] as number, decisionOf(codes[m] as number));
    });
  }
  return call.users.map((user) => byUser.get(user) as ModelDecision);
}
