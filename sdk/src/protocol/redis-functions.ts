// Lua scripts run as Redis Functions: one library per version of the code, loaded once per primary
// (FUNCTION LOAD), each script called by FCALL, so a call runs only its function, not the script's chunk.
// The SDK's direct transport runs quota-sync this way, and so does the Tollgate service (its engine, rate
// limits and the check API's quota sync): the same chunk makes the same library, shared on a cluster.
// No package dependencies at run time (node:crypto; ioredis for its types only).
import { createHash } from "node:crypto";
import type { Cluster, Redis } from "ioredis";

/** A cluster client, or a single Redis (tests, a standalone deployment). */
type Client = Cluster | Redis;

/** The primaries of `client`: its own node when it is not a cluster client. */
const primariesOf = (client: Client): Redis[] =>
  client.isCluster ? (client as Cluster).nodes("master") : [client as Redis];

/**
 * A library of Lua scripts. Each script is a chunk that returns the function to register, which Redis then
 * calls as `f(keys, args)` (the chunk's top level runs once, at load). The names carry a hash of the whole
 * library's code, so two deployed versions coexist on a cluster during a rollout.
 */
export interface RedisFunctionLibrary<Name extends string = string> {
  /** `tollgate_<first 8 hex digits of the code's SHA-1>` */
  readonly name: string;
  /** What FUNCTION LOAD is sent: the `#!lua name=` line, then each chunk and its registration. */
  readonly code: string;
  /** The registered name of each script (function names are global across a node's libraries). */
  readonly functions: Readonly<Record<Name, string>>;
  /** The chunk of each `no-writes` script: run as an EVAL script where the library cannot be loaded. */
  readonly readerChunks: Readonly<Partial<Record<Name, string>>>;
}

/**
 * A script of a library: a Lua chunk returning its function, or the chunk and the flags its function is
 * registered with. A function without flags may write, so Redis refuses to start it on a node past
 * `maxmemory` (OOM) even when this call would write nothing; `no-writes` makes it a reader, which Redis
 * runs there (and which fails if it tries a write).
 */
export type LibraryScript = string | { readonly chunk: string; readonly flags: readonly "no-writes"[] };

/** How `defineLibrary` lays the code out (part of the name's hash): 2, each distinct chunk once. */
const LAYOUT = 2;

const chunkOf = (script: LibraryScript): string => (typeof script === "string" ? script : script.chunk);

/** The library of `scripts` (script name -> its chunk, and its flags); names are `[A-Za-z0-9_]`. */
export function defineLibrary<Name extends string>(
  scripts: Readonly<Record<Name, LibraryScript>>,
): RedisFunctionLibrary<Name> {
  const entries = Object.entries(scripts) as [Name, LibraryScript][];
  for (const [name] of entries) {
    if (!/^[A-Za-z][A-Za-z0-9_]*$/.test(name)) throw new Error(`Redis function name "${name}": letters, digits, _`);
  }
  // the hash covers the flags and how the code is laid out too: a node holding the library answers
  // "already exists" to the same name, so the same name must always mean the same code
  const sha8 = createHash("sha1")
    .update(JSON.stringify([LAYOUT, entries]))
    .digest("hex")
    .slice(0, 8);
  const functions = Object.fromEntries(entries.map(([name]) => [name, `${name}_${sha8}`])) as Record<Name, string>;
  // each distinct chunk once, inside its own function: its locals stay its own, and its `return` hands over
  // the callback, which every script of that chunk registers (a writer and its no-writes reader share it)
  const chunks = [...new Set(entries.map(([, script]) => chunkOf(script)))];
  const callbacks = chunks.map((chunk, i) => `local callback${i} = (function()\n${chunk}\nend)()`);
  const registrations = entries.map(([name, script]) => {
    const callback = `callback${chunks.indexOf(chunkOf(script))}`;
    if (typeof script === "string") return `redis.register_function('${functions[name]}', ${callback})`;
    const flags = script.flags.map((flag) => `'${flag}'`).join(", ");
    return `redis.register_function{function_name = '${functions[name]}', callback = ${callback}, flags = { ${flags} }}`;
  });
  const libraryName = `tollgate_${sha8}`;
  const readerChunks = Object.fromEntries(
    entries.filter(([, script]) => typeof script !== "string").map(([name, script]) => [name, chunkOf(script)]),
  ) as Partial<Record<Name, string>>;
  return {
    name: libraryName,
    code: [`#!lua name=${libraryName}`, ...callbacks, ...registrations].join("\n"),
    functions,
    readerChunks,
  };
}

/**
 * quota-sync's library, as the SDK and the Tollgate service both load it (the same chunk and flags make the
 * same name, so they share it): `quotaSync`, and `quotaRead`, the same chunk registered `no-writes` for
 * reads (instance "": `tollgate quotas usage`), which a node past `maxmemory` still runs.
 */
export function quotaLibraryOf(chunk: string): RedisFunctionLibrary<"quotaSync" | "quotaRead"> {
  return defineLibrary({ quotaSync: chunk, quotaRead: { chunk, flags: ["no-writes"] } });
}

/**
 * A script's chunk as an EVAL script: every call runs the whole chunk, then its function with KEYS and ARGV
 * (what a library saves per call; tests hold FCALL to it, and the instruction count compares the two).
 */
export const evalScriptOf = (chunk: string): string => `return (function()\n${chunk}\nend)()(KEYS, ARGV)`;

/** The reply of FUNCTION LOAD for a library the node already holds (same name, so the same code). */
const ALREADY_LOADED = /^ERR Library '.*' already exists/;
/**
 * A write refused by a replica: a node the client still lists as a primary was demoted by a failover. It
 * gets the library by replication from its new primary, so a load skips it.
 */
const READ_ONLY = /^READONLY /;
/** The reply of FCALL for a function the node does not hold (a new or emptied node, FUNCTION FLUSH). */
const NOT_FOUND = /^ERR Function not found/;

/** By name, not `instanceof`: a service and this package may each have their own copy of ioredis. */
const isReply = (error: unknown, pattern: RegExp): boolean =>
  error instanceof Error && error.name === "ReplyError" && pattern.test(error.message);

/**
 * Loads `library` on every primary of `cluster`. A node that holds it already answers "already exists"
 * before compiling anything, so this is cheap to repeat. Replicas get it by replication. A node demoted by a
 * failover since the client last looked (READONLY) is skipped, and the primaries are looked up again and
 * loaded once more, so the promoted node is not missed. Every node's load is waited for, whatever the others
 * answer (a node past maxmemory refuses FUNCTION LOAD: the others still get it); then rejects as the first
 * failing node's command rejected (classified by the caller like any other reply or no-answer).
 */
export async function loadLibrary(client: Client, library: RedisFunctionLibrary): Promise<void> {
  const demoted = await loadOnAll(primariesOf(client), library);
  if (!demoted || !client.isCluster) return;
  // a failover the client has not seen: its new primary may be missing from the list, so look again once
  await new Promise<void>((resolve, reject) =>
    (client as Cluster).refreshSlotsCache((error) => (error ? reject(error) : resolve())),
  );
  await loadOnAll(primariesOf(client), library);
}

/** Loads on every node, all settled; resolves whether one was demoted, or rejects as the first failure. */
async function loadOnAll(nodes: Redis[], library: RedisFunctionLibrary): Promise<boolean> {
  const results = await Promise.allSettled(nodes.map((node) => loadOn(node, library)));
  const failed = results.find((result) => result.status === "rejected");
  if (failed) throw failed.reason;
  return results.some((result) => result.status === "fulfilled" && result.value);
}

/** Resolves true when the node answered READONLY (no longer a primary). */
function loadOn(node: Redis, library: RedisFunctionLibrary): Promise<boolean> {
  return node.function("LOAD", library.code).then(
    () => false,
    (error: unknown) => {
      if (isReply(error, READ_ONLY)) return true;
      if (!isReply(error, ALREADY_LOADED)) throw error;
      return false;
    },
  );
}

/** One load at a time per client and library: a flushed node's concurrent calls wait on the same load. */
const reloads = new WeakMap<Client, Map<string, Promise<void>>>();

function reload(cluster: Client, library: RedisFunctionLibrary): Promise<void> {
  let byLibrary = reloads.get(cluster);
  if (!byLibrary) {
    byLibrary = new Map();
    reloads.set(cluster, byLibrary);
  }
  let loading = byLibrary.get(library.name);
  if (!loading) {
    loading = loadLibrary(cluster, library).finally(() => byLibrary.delete(library.name));
    byLibrary.set(library.name, loading);
  }
  return loading;
}

/**
 * ioredis defines `fcall` and `fcallBuffer` (as for every command) without typings. Not
 * `callBuffer("fcall", ...)`: with auto-pipelining, ioredis 6 drops a generic call's command name (the
 * first argument is sent as it).
 */
type Fcalls = Client & {
  fcallBuffer(fn: string, numberOfKeys: number, ...keysAndArgs: (string | Buffer)[]): Promise<Buffer>;
  fcall(fn: string, numberOfKeys: number, ...keysAndArgs: (string | number | Buffer)[]): Promise<unknown>;
  evalBuffer(script: string, numberOfKeys: number, ...keysAndArgs: (string | Buffer)[]): Promise<Buffer>;
};

/**
 * `send()`, and once more after loading `library` when it answers "Function not found". That reply proves
 * the call did not run (a node added by scale-out, restarted empty, or flushed): the library is loaded on
 * every primary and the call sent once more, also when the load failed on some node (another primary past
 * maxmemory must not stop a call on this one). When the call then still finds no function: a reader
 * (`readerEval`) runs as an EVAL script of its chunk (its node refused FUNCTION LOAD past maxmemory, but an
 * EVAL that writes nothing still runs there); anything else rejects as the load's failure came (an outage
 * or an error reply), never as "Function not found".
 */
function withLibrary<T>(
  cluster: Client,
  library: RedisFunctionLibrary,
  send: () => Promise<T>,
  readerEval: (() => Promise<T>) | undefined,
): Promise<T> {
  return send().catch((error: unknown) => {
    if (!isReply(error, NOT_FOUND)) throw error;
    return reload(cluster, library).then(send, (loadError: unknown) =>
      send().catch((again: unknown) => {
        if (!isReply(again, NOT_FOUND)) throw again;
        if (readerEval) return readerEval();
        throw loadError;
      }),
    );
  });
}

/** FCALL of `library`'s function `name` with its reply as Buffers (ioredis routes it by its first key). */
export function fcallBuffer<Name extends string>(
  cluster: Client,
  library: RedisFunctionLibrary<Name>,
  name: Name,
  keys: readonly string[],
  args: readonly (string | Buffer)[],
): Promise<Buffer> {
  const reader = library.readerChunks[name];
  return withLibrary(
    cluster,
    library,
    () => (cluster as Fcalls).fcallBuffer(library.functions[name], keys.length, ...keys, ...args),
    reader === undefined
      ? undefined
      : () => (cluster as Fcalls).evalBuffer(evalScriptOf(reader), keys.length, ...keys, ...args),
  );
}

/**
 * FCALL of `library`'s function `name` with its reply as ioredis decodes it (integers as numbers, an
 * array of them as an array), for replies without binary strings: the rate-limit functions'.
 */
export function fcall<T, Name extends string = string>(
  cluster: Client,
  library: RedisFunctionLibrary<Name>,
  name: Name,
  keys: readonly string[],
  args: readonly (string | number | Buffer)[],
): Promise<T> {
  const reader = library.readerChunks[name];
  return withLibrary(
    cluster,
    library,
    () => (cluster as Fcalls).fcall(library.functions[name], keys.length, ...keys, ...args) as Promise<T>,
    reader === undefined
      ? undefined
      : () => cluster.eval(evalScriptOf(reader), keys.length, ...keys, ...args) as Promise<T>,
  );
}
