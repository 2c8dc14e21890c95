// The Lua scripts in lua/, read once per process and joined from their parts (sdk/src/protocol/lua-chunks.ts).
// They run as Redis Functions (sdk/src/protocol/redis-functions.ts), loaded once per primary and called by
// FCALL: the engine's in tollgateLibrary, the rate-limit scripts in limitLibrary (called by RedisLimitStore).
import { defineLibrary, type LibraryScript, quotaLibraryOf, readLuaChunk } from "../../sdk/src/protocol/index.ts";
import { ALGORITHMS, type Algorithm } from "../core/limits/limit-specs.ts";

/**
 * In the repository the scripts are at ../../lua/ from this file; in a Lambda bundle (one file), the
 * bundling step copies that folder, parts included, to ./lua/ beside it.
 */
const LUA_DIRS = [new URL("./lua/", import.meta.url), new URL("../../lua/", import.meta.url)];

/** The chunk of script `name`: lua/<name>.lua, or the entry lua/<name>/<name>.lua joined with its parts. */
export const load = (name: string): string => readLuaChunk(LUA_DIRS, name);

/** The rate-limit chunks: limit-common.lua, then the algorithms they run, then their driver. */
const common = load("limit-common");

/** The chunk of POST /v1/limit per algorithm: only that algorithm is defined in it. */
const limitChunksByAlgorithm = Object.fromEntries(
  ALGORITHMS.map((algorithm) => [algorithm, [common, load(algorithm), load("limit")].join("\n")]),
) as Record<Algorithm, string>;

/** The Redis Function of each algorithm's one-limit chunk in limitLibrary. */
export const LIMIT_FUNCTIONS = {
  "fixed-window": "limit_fixed_window",
  "token-bucket": "limit_token_bucket",
  "sliding-window": "limit_sliding_window",
  "sliding-log": "limit_sliding_log",
  gcra: "limit_gcra",
} as const satisfies Record<Algorithm, string>;

/** The reader of each rate-limit function: the same chunk registered `no-writes`, for peeks (every cost 0). */
export const readerOf = <Name extends string>(name: Name): `${Name}_read` => `${name}_read`;

/**
 * The rate-limit scripts as Redis Functions (redis-functions.ts), a library of their own (a change to the
 * engine's scripts leaves their names alone): POST /v1/limit's chunk per algorithm, and POST /v1/limits'
 * chunk (every algorithm, any number of keys, 1 .. MAX_LIMITS, of one hash tag) as `limits`. As EVAL
 * scripts every call re-ran the chunk, defining limit-common's and the algorithm's functions again: about a
 * third of a fixed-window call's instructions (docs/decisions/0020-rate-limit-fast-path.md). Each is also
 * registered `no-writes` as `<name>_read`, which a peek (cost 0: nothing is written) calls: Redis refuses
 * to start a function without flags on a node past `maxmemory`, where a peek by EVAL still answered.
 */
const limitChunks = {
  ...(Object.fromEntries(
    ALGORITHMS.map((algorithm) => [LIMIT_FUNCTIONS[algorithm], limitChunksByAlgorithm[algorithm]]),
  ) as Record<(typeof LIMIT_FUNCTIONS)[Algorithm], string>),
  limits: [common, ...ALGORITHMS.map(load), load("limits")].join("\n"),
  // POST /v1/limit checks of one slot that came together (an environment with several invocations at once)
  limit_batch: [common, ...ALGORITHMS.map(load), load("limit-batch")].join("\n"),
};
type LimitFunction = keyof typeof limitChunks;
export const limitLibrary = defineLibrary({
  ...limitChunks,
  ...(Object.fromEntries(
    Object.entries(limitChunks).map(([name, chunk]): [string, LibraryScript] => [
      readerOf(name),
      { chunk, flags: ["no-writes"] },
    ]),
  ) as Record<`${LimitFunction}_read`, LibraryScript>),
});

/**
 * The scripts run as Redis Functions, one library (redis-functions.ts): each chunk runs once per primary at
 * load and returns the function FCALL runs. cap-sends joins to 2,600 lines: as an EVAL script, every call
 * re-created its ~60 functions (docs/decisions/0006-cap-sends-as-a-redis-function.md). A peek (mode "peek":
 * a check with `consume: false` writes nothing) goes to `capSendsRead`, the same chunk registered
 * `no-writes`, which a node past `maxmemory` still runs.
 */
const capSends = load("cap-sends");
export const tollgateLibrary = defineLibrary({
  capSends,
  capSendsRead: { chunk: capSends, flags: ["no-writes"] },
});

/**
 * Quotas' sync script as a Redis Function, a library of its own (the engine's changes leave its name alone),
 * the SDK's direct transport loads the same (`quotaLibraryOf`); reads go to `quotaRead` (`no-writes`):
 * a rule's rings, windows and formats are built once per rule text and node, and its functions once per
 * node; as an EVAL script every call built them again (docs/decisions/0047-quota-sync-as-a-redis-function.md).
 */
export const quotaLibrary = quotaLibraryOf(load("quota-sync"));
