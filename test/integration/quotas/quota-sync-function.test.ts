// quota-sync.lua as a Redis Function against the same chunk run fresh by EVAL, and against the previous
// script (one EVAL chunk, every count read from 'r'): random sequences of syncs, reads, retries, rule
// changes, malformed entries, failing calls and keys stored as b3 go through each on a namespace of its
// own, and every reply and every stored hash must be the same. A state cached by the function across calls
// (a rule's rings and windows, the key being updated) would show here as a difference.
import { readFileSync } from "node:fs";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { load } from "../../../functions/adapters/lua-scripts.ts";
import type { TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { RedisQuotaStore } from "../../../functions/adapters/redis-quota-store.ts";
import {
  encodeRule,
  encodeSync,
  evalScriptOf,
  fcall,
  PROTOCOL,
  type QuotaRule,
  quotaKey,
  slotGroupKeys,
  slotGroupPrefix,
} from "../../../sdk/src/protocol/index.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";
import { setStoreClock, testClockQuotaChunk, testClockQuotaLibrary } from "../../support/quota-test-clock.ts";
import { T0 } from "../../support/rules.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

const CHUNK = load("quota-sync");
const FRESH = evalScriptOf(CHUNK);
// the random calls run the test build, function and fresh EVAL alike: each step sets the store's clock
const TEST_FRESH = evalScriptOf(testClockQuotaChunk());
/** v0.2.0's script, before it ran as a Function: one EVAL chunk that reads every key's 'r' */
const PREVIOUS = readFileSync(new URL("../../compat/v0.2.0/quota-sync-settle-lag.lua", import.meta.url), "utf8");

type Runner = "function" | "fresh" | "previous";
type Outcome = { reply: unknown } | { error: string };

async function run(runner: Runner, keys: string[], args: (string | number | Buffer)[]): Promise<Outcome> {
  try {
    if (runner === "function") return { reply: await fcall(cluster, testClockQuotaLibrary, "quotaSync", keys, args) };
    const script = runner === "fresh" ? TEST_FRESH : PREVIOUS;
    return { reply: await cluster.eval(script, keys.length, ...keys, ...args) };
  } catch (error) {
    // the same failure, wherever the script text says it happened
    return { error: (error as Error).message.replace(/user_(function|script):\d+/g, "script").split(" script:")[0]! };
  }
}

const NAMES = ["a", "b", "c", "d", "e", "f", "g", "h"];
const INSTANCES = Array.from({ length: 40 }, (_, i) => `i${i}`);

interface Entry {
  name: number;
  offered: number;
  want: number;
  usage: [number, number][];
  refunds: [number, number][];
}

type Step =
  | {
      kind: "sync";
      instance: number;
      seq: "next" | "retry" | "older" | "jump";
      back: number;
      gapMs: number;
      entries: Entry[];
    }
  | { kind: "rule"; rule: QuotaRule }
  | { kind: "remove" }
  | { kind: "malformed"; entries: Entry[]; at: number; how: "short" | "long" | "tiny" }
  | { kind: "wrongtype"; entries: Entry[]; at: number }
  | { kind: "b3"; name: number }
  | { kind: "flush" };

const ruleArb: fc.Arbitrary<QuotaRule> = fc.record({
  mode: fc.constantFrom("approximate" as const, "strict" as const),
  leaseMs: fc.constantFrom(20, 50, 120, 1000),
  fallback: fc.constant("share" as const),
  slotGroups: fc.constant(1),
  limits: fc.uniqueArray(
    fc.record({
      windowMs: fc.constantFrom(1000, 2000, 5000, 10_000, 60_000),
      max: fc.oneof(fc.integer({ min: 1, max: 60 }), fc.integer({ min: 1, max: 10_000 })),
    }),
    { selector: (limit) => limit.windowMs, minLength: 1, maxLength: 3 },
  ),
});

const pairArb = fc.tuple(
  fc.oneof(
    { weight: 9, arbitrary: fc.integer({ min: -8000, max: 300 }) },
    { weight: 1, arbitrary: fc.integer({ min: -200_000, max: 90_000 }) },
  ),
  fc.oneof(
    { weight: 9, arbitrary: fc.integer({ min: 0, max: 50 }) },
    { weight: 1, arbitrary: fc.constantFrom(4_294_967_295, 5e9, 1e15) },
  ),
);
const entryArb: fc.Arbitrary<Entry> = fc.record({
  name: fc.integer({ min: 0, max: NAMES.length - 1 }),
  offered: fc.integer({ min: 0, max: 6 }),
  want: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 40 })),
  usage: fc.array(pairArb, { maxLength: 3 }),
  refunds: fc.array(pairArb, { maxLength: 2 }),
});
const entriesArb = fc.oneof(
  fc.array(entryArb, { minLength: 1, maxLength: 3 }),
  fc.array(entryArb, { minLength: 1, maxLength: 20, size: "max" }),
);

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 12,
    arbitrary: fc.record({
      kind: fc.constant("sync" as const),
      // -1: a read; mostly four instances, sometimes many (a key's fields of silent instances go)
      instance: fc.oneof(
        { weight: 4, arbitrary: fc.integer({ min: -1, max: 3 }) },
        { weight: 1, arbitrary: fc.integer({ min: 0, max: INSTANCES.length - 1 }) },
      ),
      seq: fc.oneof(
        { weight: 6, arbitrary: fc.constant("next" as const) },
        { weight: 2, arbitrary: fc.constant("retry" as const) },
        { weight: 1, arbitrary: fc.constant("older" as const) },
        { weight: 1, arbitrary: fc.constant("jump" as const) },
      ),
      back: fc.integer({ min: 1, max: 40 }),
      gapMs: fc.oneof(
        { weight: 6, arbitrary: fc.integer({ min: 0, max: 120 }) },
        { weight: 2, arbitrary: fc.integer({ min: -300, max: 0 }) },
        { weight: 2, arbitrary: fc.integer({ min: 0, max: 7000 }) },
        { weight: 1, arbitrary: fc.integer({ min: 7000, max: 70_000 }) },
      ),
      entries: entriesArb,
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("rule" as const), rule: ruleArb }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("remove" as const) }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant("malformed" as const),
      entries: entriesArb,
      at: fc.nat(),
      how: fc.constantFrom("short" as const, "long" as const, "tiny" as const),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant("wrongtype" as const), entries: entriesArb, at: fc.nat() }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("b3" as const), name: fc.nat(NAMES.length - 1) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("flush" as const) }) },
);

function pack(entry: Entry, now: number): Buffer {
  const pairs = [...entry.usage, ...entry.refunds];
  const bytes = Buffer.alloc(32 + 16 * pairs.length);
  for (const [i, value] of [entry.offered, entry.want, entry.usage.length, entry.refunds.length].entries()) {
    bytes.writeDoubleLE(value, 8 * i);
  }
  pairs.forEach(([offset, count], j) => {
    bytes.writeDoubleLE(Math.max(0, now + offset), 32 + 16 * j);
    bytes.writeDoubleLE(count, 40 + 16 * j);
  });
  return bytes;
}

/** A namespace's Redis keys: the slot group's, and each quota key (one more, "bad", holds a string). */
function keysOf(namespace: string) {
  const group = slotGroupKeys(namespace, "api", 0);
  const prefix = slotGroupPrefix(namespace, "api", 0);
  const state = (name: string) => quotaKey(prefix, name);
  return { group, state, all: [group.config, group.sequences, group.instances, ...[...NAMES, "bad"].map(state)] };
}

/**
 * Everything stored under a namespace, binary values as hex, and whether each key has a TTL; then no key
 * keeps one, so none expires in real time between one namespace's call and another's.
 */
async function snapshot(namespace: string, clocks: boolean) {
  const { all } = keysOf(namespace);
  const pipeline = cluster.pipeline();
  for (const key of all) pipeline.type(key).hgetallBuffer(key).pttl(key);
  for (const key of all) pipeline.persist(key);
  const results = (await pipeline.exec())!;
  return all.map((key, i) => {
    const [type, hash, ttl] = [0, 1, 2].map((j) => results[3 * i + j]![1]);
    const fields =
      type === "hash"
        ? Object.fromEntries(
            Object.entries(hash as Record<string, Buffer>)
              // the clocks the store keeps (lua/quota-sync/store-time.lua), which the previous script does not
              .filter(([field]) => clocks || !field.startsWith("#"))
              .map(([field, value]) => [field, value.toString("hex")] as const)
              .sort(([x], [y]) => (x < y ? -1 : 1)),
          )
        : type;
    return { key: key.slice(namespace.length), fields, ttl: (ttl as number) < 0 ? ttl : "set" };
  });
}

/**
 * The key in the layout the previous format used (b3): one blob 'b' with the header (demand, its time,
 * the mark, each ring's cursor, each window's sum) then every ring's slots, the two latest buckets' too.
 */
async function toB3(key: string): Promise<void> {
  const stored = await cluster.hgetallBuffer(key);
  const layout = stored.L?.toString();
  if (!layout?.startsWith("b4|") || !stored.h || !stored.r) return;
  const parts = layout
    .slice(3)
    .split(",")
    .slice(1)
    .map((part) => {
      const [, kind, w, span] = /^([ags])(\d+)\/(\d+)$/.exec(part)!;
      return { kind: kind!, w: Number(w), span: Number(span) };
    });
  const rings: { kind: string; q: number; size: number }[] = [];
  const shared = new Map<string, { kind: string; q: number; size: number }>();
  for (const part of parts) {
    const q = part.w <= 5000 ? 50 : part.w / 100;
    let ring = part.kind === "s" ? undefined : shared.get(`${part.kind}${q}`);
    if (!ring) {
      ring = { kind: part.kind, q, size: 0 };
      if (part.kind !== "s") shared.set(`${part.kind}${q}`, ring);
      rings.push(ring);
    }
    ring.size = Math.max(ring.size, part.span);
  }
  const header = Array.from({ length: stored.h.length / 8 }, (_, i) => stored.h!.readDoubleLE(8 * i));
  if (header.length !== 3 + 3 * rings.length + parts.length) return;
  const slots = Buffer.from(stored.r);
  let base = 0;
  rings.forEach((ring, r) => {
    const [cur, hot0, hot1] = header.slice(3 + 3 * r, 6 + 3 * r) as [number, number, number];
    slots.writeUInt32LE(hot0, base + (((cur % ring.size) + ring.size) % ring.size) * 4);
    slots.writeUInt32LE(hot1, base + ((((cur - 1) % ring.size) + ring.size) % ring.size) * 4);
    base += ring.size * 4;
  });
  const b3 = [...header.slice(0, 3), ...rings.map((_, r) => header[3 + 3 * r]!), ...header.slice(3 + 3 * rings.length)];
  const blob = Buffer.alloc(8 * b3.length);
  for (const [i, value] of b3.entries()) blob.writeDoubleLE(value, 8 * i);
  await cluster.hdel(key, "h", "r");
  await cluster.hset(key, { L: `b3|${layout.slice(3)}`, b: Buffer.concat([blob, slots]) });
}

describe("quota-sync as a Redis Function", () => {
  it("answers and stores what the same chunk run fresh by EVAL does, and what the previous script does, over random calls", async () => {
    await fc.assert(
      fc.asyncProperty(
        ruleArb,
        fc.array(stepArb, { minLength: 5, maxLength: 40, size: "max" }),
        fc.array(fc.boolean(), { minLength: 40, maxLength: 40 }),
        fc.array(fc.array(fc.nat(), { minLength: 4, maxLength: 4 }), { minLength: 40, maxLength: 40 }),
        fc.boolean(),
        async (generated, generatedSteps, previousInMixed, orders, unchanged) => {
          // The previous script answers as this one where nothing changed since: approximate keys under one
          // set of windows (strict's spent buckets are finer now, and a key whose layout changes keeps its
          // counts, where the previous script dropped them). In half the runs every rule is made so, and the
          // previous script is compared; in the others, the function and the fresh EVAL only.
          const legacy = (rule: QuotaRule): QuotaRule => ({
            ...rule,
            mode: "approximate",
            limits: generated.limits.map((limit, i) => ({ ...limit, max: rule.limits[i]?.max ?? limit.max })),
          });
          const first = unchanged ? legacy(generated) : generated;
          // and no request waiting for its reply (approximate `want`, which the previous script ignored)
          const noneWaiting = (entries: Entry[]) => entries.map((e) => ({ ...e, want: 0 }));
          // and time that never goes back: a caller behind the slot group's time counts as that time now
          const steps = generatedSteps.map((step) =>
            !unchanged
              ? step
              : step.kind === "rule"
                ? { ...step, rule: legacy(step.rule) }
                : step.kind === "sync"
                  ? { ...step, gapMs: Math.max(0, step.gapMs), entries: noneWaiting(step.entries) }
                  : "entries" in step
                    ? { ...step, entries: noneWaiting(step.entries) }
                    : step,
          );
          // function, fresh EVAL, previous script, and one where each step runs the function or the previous
          const spaces = [uniqueNamespace(), uniqueNamespace(), uniqueNamespace(), uniqueNamespace()];
          const runners = (step: number): Runner[] =>
            unchanged
              ? ["function", "fresh", "previous", previousInMixed[step] ? "previous" : "function"]
              : ["function", "fresh", "function", "fresh"];
          let version = 1;
          const publish = (rule: QuotaRule | null) =>
            Promise.all(
              spaces.map((ns) =>
                cluster.hset(keysOf(ns).group.config, {
                  v: rule ? `v${version}` : "",
                  r: rule ? encodeRule(rule) : "",
                }),
              ),
            );
          await publish(first);
          const high = INSTANCES.map(() => 0);
          const sent: { instance: number; seq: number; entries: Entry[]; now: number }[][] = INSTANCES.map(() => []);
          let now = T0;
          // the store's clock: the latest time any caller sent (a caller's clock may go back, the store's not)
          let storeNow = T0;
          const log: string[] = [];
          for (const [s, step] of steps.entries()) {
            let call: ((ns: string) => { keys: string[]; args: (string | number | Buffer)[] }) | undefined;
            const header = (instance: string, seq: number, seen: string, at: number) => [
              PROTOCOL,
              at,
              instance,
              seq,
              seen,
            ];
            if (step.kind === "rule") {
              version++;
              await publish(step.rule);
              log.push(`rule v${version} ${encodeRule(step.rule)}`);
            } else if (step.kind === "remove") {
              await publish(null);
              log.push("remove");
            } else if (step.kind === "flush") {
              const primaries = cluster.nodes("master");
              await Promise.all(
                primaries.map((node) => node.function("DELETE", testClockQuotaLibrary.name).catch(() => {})),
              );
              log.push("function deleted");
            } else if (step.kind === "b3") {
              for (const ns of spaces) await toB3(keysOf(ns).state(NAMES[step.name]!));
              log.push(`b3 ${NAMES[step.name]}`);
            } else if (step.kind === "sync") {
              now += step.gapMs;
              const at = now;
              if (step.instance < 0) {
                call = (ns) => {
                  const { group, state } = keysOf(ns);
                  return {
                    keys: [
                      group.config,
                      group.sequences,
                      group.instances,
                      ...step.entries.map((e) => state(NAMES[e.name]!)),
                    ],
                    args: [...header("", 0, `v${version}`, at), ...step.entries.map((e) => pack(e, at))],
                  };
                };
                log.push(`read @${at - T0} ${JSON.stringify(step.entries)}`);
              } else {
                const history = sent[step.instance]!;
                let request = {
                  instance: step.instance,
                  seq: high[step.instance]! + 1,
                  entries: step.entries,
                  now: at,
                };
                if (step.seq === "retry" && history.length > 0) request = history[step.back % history.length]!;
                else if (step.seq === "older")
                  request = { ...request, seq: Math.max(1, high[step.instance]! - step.back) };
                else if (step.seq === "jump") {
                  high[step.instance]! += step.back;
                  request = { ...request, seq: high[step.instance]! };
                } else high[step.instance]!++;
                history.push(request);
                const { seq, entries } = request;
                const instance = INSTANCES[step.instance]!;
                const seen = s % 3 === 0 ? "" : `v${version}`;
                call = (ns) => {
                  const { group, state } = keysOf(ns);
                  return {
                    keys: [
                      group.config,
                      group.sequences,
                      group.instances,
                      ...entries.map((e) => state(NAMES[e.name]!)),
                    ],
                    args: [...header(instance, seq, seen, at), ...entries.map((e) => pack(e, request.now))],
                  };
                };
                log.push(`sync ${instance} #${seq} @${at - T0} ${JSON.stringify(entries)}`);
              }
            } else {
              const instance = INSTANCES[s % INSTANCES.length]!;
              const seq = high[s % INSTANCES.length]! + 1;
              const at = now;
              const broken = step.at % step.entries.length;
              call = (ns) => {
                const { group, state } = keysOf(ns);
                const keys = [
                  group.config,
                  group.sequences,
                  group.instances,
                  ...step.entries.map((e) => state(NAMES[e.name]!)),
                ];
                const args: (string | number | Buffer)[] = [
                  ...header(instance, seq, `v${version}`, at),
                  ...step.entries.map((e) => pack(e, at)),
                ];
                if (step.kind === "wrongtype") {
                  keys[3 + broken] = state("bad");
                } else {
                  const entry = args[5 + broken] as Buffer;
                  args[5 + broken] =
                    step.how === "tiny"
                      ? entry.subarray(0, 24)
                      : step.how === "short"
                        ? entry.subarray(0, entry.length - 8)
                        : // longer than the ages of its usage pairs would make it (a valid entry)
                          Buffer.concat([entry, Buffer.alloc(16 + 8 * entry.readDoubleLE(16))]);
                }
                return { keys, args };
              };
              if (step.kind === "wrongtype") {
                high[s % INSTANCES.length]!++;
                for (const ns of spaces) await cluster.set(keysOf(ns).state("bad"), "x");
              }
              log.push(`${step.kind} ${instance} #${seq} @${at - T0} at ${broken} ${JSON.stringify(step.entries)}`);
            }
            if (call) {
              storeNow = Math.max(storeNow, now);
              for (const ns of spaces) await setStoreClock(cluster, ns, "api", 0, storeNow);
              const outcomes: Outcome[] = [];
              // in an order of its own per step: the function's calls on two namespaces do not follow each other
              const order = [0, 1, 2, 3].sort((x, y) => orders[s]![x]! - orders[s]![y]!);
              for (const i of order) {
                const { keys, args } = call(spaces[i]!);
                outcomes[i] = await run(runners(s)[i]!, keys, args);
              }
              const context = `${log.join("\n")}\n(step ${s}, runners ${runners(s).join(",")})`;
              expect(outcomes[1], `fresh EVAL vs function\n${context}`).toEqual(outcomes[0]);
              if (unchanged) {
                expect(outcomes[2], `previous script vs function\n${context}`).toEqual(outcomes[0]);
                expect(outcomes[3], `mixed vs function\n${context}`).toEqual(outcomes[0]);
              }
            }
            const [mine, ...others] = await Promise.all(spaces.map((ns) => snapshot(ns, !unchanged)));
            for (const [i, other] of (unchanged ? others : others.slice(0, 1)).entries()) {
              expect(
                other,
                `stored state of ${["fresh", "previous", "mixed"][i]} vs function\n${log.join("\n")}`,
              ).toEqual(mine);
            }
          }
        },
      ),
      {
        numRuns: Number(process.env.QS_RUNS ?? 20),
        endOnFailure: true,
        // QS_SEED and QS_PATH replay a reported failure
        ...(process.env.QS_SEED ? { seed: Number(process.env.QS_SEED), path: process.env.QS_PATH } : {}),
      },
    );
  });
});

describe("quota-sync as a Redis Function, on a full node", () => {
  it('a read (instance "", `tollgate quotas usage`) answers on a node past maxmemory, as the script did by EVAL: reads write nothing', async () => {
    const namespace = uniqueNamespace();
    const rule: QuotaRule = {
      mode: "approximate",
      leaseMs: 1000,
      fallback: "share",
      slotGroups: 1,
      limits: [{ windowMs: 1000, max: 100 }],
    };
    const store = new RedisQuotaStore(cluster, namespace);
    await store.publish("api", rule, "v1", 1, 1);
    const sync = (instanceId: string, seq: number) => ({
      instanceId,
      rule: "api",
      group: 0,
      seq,
      configVersion: "v1",
      entries: [{ key: "k", usage: [[T0, 3]] as [number, number][], refunds: [], offered: 3, want: 0 }],
    });
    const applied = await store.sync(sync("a", 1), T0);
    const { keys, args } = encodeSync(namespace, sync("", 0), T0 + 10, { read: true });
    // a full cache fails writes (noeviction, infra/cache.ts); what it holds can still be read
    const primaries = cluster.nodes("master");
    const limits = await Promise.all(primaries.map((node) => node.config("GET", "maxmemory") as Promise<string[]>));
    let byEval: unknown;
    let read: unknown;
    try {
      await Promise.all(primaries.map((node) => node.config("SET", "maxmemory", "1")));
      byEval = await cluster.eval(FRESH, keys.length, ...keys, ...args);
      // a function registered without flags may write, so Redis refuses to start it past maxmemory (OOM),
      // where a script without a shebang fails only at its first write, and a read makes none
      read = await store.read(sync("", 0), T0 + 10).catch((error: Error) => error);
    } finally {
      await Promise.all(primaries.map((node, i) => node.config("SET", "maxmemory", limits[i]![1]!)));
    }
    // the same chunk by EVAL reads the key: its one window holds the usage and the allowance
    expect((byEval as unknown[]).at(-1)).toBe(applied.entries[0]!.used[0]);
    expect(read).toMatchObject({ entries: [{ used: applied.entries[0]!.used }] });
  });
});
