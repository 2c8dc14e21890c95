// Redis instructions per `Limiter.check` call, load-independent: a standalone redis-server under callgrind
// (only FCALL counted, and rate-limiter-flexible's EVALSHA for reference). The bench's call shape: every
// call allowed, cost 1, over 1000 keys, about 30 calls per ms of request time (the bench's rate), so each
// key is charged every ~33 ms and a sliding log of 1 s holds ~30 entries; then the sliding log's documented
// cases on one key (window 100 s): 100 and 99,000 entries, sliding by 1 ms a call, full and denied, and
// 1,000 charges in one ms. CG_PORT (8470), CALLS (3000, measured per algorithm), FULL_LOG (1: fill the log
// to 99,000 entries; 0 skips those rows, the slow part under valgrind), EXTRA_LIBS (1: the engine's and the
// quotas' libraries loaded too, as on a deployed node: Redis runs every Functions library in one Lua VM).
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RateLimiterRedis } from "rate-limiter-flexible";
import {
  LIMIT_FUNCTIONS,
  limitLibrary,
  quotaLibrary,
  readerOf,
  tollgateLibrary,
} from "../../functions/adapters/lua-scripts.ts";
import { type LimitStore, limitArgs, peeks } from "../../functions/core/limits/limit-script.ts";
import { Limiter } from "../../functions/core/limits/limiter.ts";
import { fixedClock } from "../../functions/core/shared/clock.ts";
import { limitKey } from "../../sdk/src/protocol/index.ts";
import { isMain } from "../is-main.ts";
import { dumper, startCallgrindServer, stopCallgrindServer } from "./callgrind-server.ts";

const KEYS = 1000;
const IN_FLIGHT = 32;
/** Calls per ms of request time: the bench's ~30,000 calls/s. */
const PER_MS = 30;

const SPECS: Record<string, object> = {
  "fixed-window": { algorithm: "fixed-window", max: 1_000_000_000, windowMs: 60_000 },
  "token-bucket": { algorithm: "token-bucket", max: 1_000_000_000, refillAmount: 1, refillEveryMs: 1000 },
  "sliding-window": { algorithm: "sliding-window", max: 1_000_000_000, windowMs: 60_000 },
  "sliding-log": { algorithm: "sliding-log", max: 100_000, windowMs: 1000 },
  gcra: { algorithm: "gcra", burst: 1_000_000, count: 1000, periodMs: 1000 },
};

async function main(port: number, calls: number, fullLog: boolean) {
  const dir = mkdtempSync(join(tmpdir(), "limits-cg-"));
  const { child, redis } = await startCallgrindServer(port, dir, ["fcallCommand", "evalShaCommand"]);
  const dump = dumper(child, dir);
  try {
    await redis.function("LOAD", limitLibrary.code);
    if (process.env.EXTRA_LIBS === "1")
      for (const library of [tollgateLibrary, quotaLibrary]) await redis.function("LOAD", library.code);
    type BufferFcall = { fcallBuffer: (name: string, keys: number, ...rest: (string | Buffer)[]) => Promise<Buffer> };
    const fcallBuffer = (name: string, key: string, args: Buffer) =>
      (redis as typeof redis & BufferFcall).fcallBuffer(name, 1, key, args);
    const store: LimitStore = {
      runLimit: (algorithm, key, args) => {
        const writer = LIMIT_FUNCTIONS[algorithm];
        return fcallBuffer(limitLibrary.functions[peeks(args) ? readerOf(writer) : writer], key, args);
      },
      runLimits: (keys, args) =>
        redis.fcall(limitLibrary.functions.limits, keys.length, ...keys, ...args) as Promise<number[]>,
    };
    // request times a day ahead of the server's clock: no state expires while valgrind runs
    const start = Date.now() + 86_400_000;
    const clock = fixedClock(start);
    const k = (instructions: number) => `${(instructions / 1000).toFixed(1)}k`;

    /** Instructions per call of `call(i)` for i in [from, to), IN_FLIGHT at a time, the clock at PER_MS a ms. */
    const run = async (call: (i: number) => Promise<unknown>, from: number, to: number) => {
      dump();
      for (let i = from; i < to; i += IN_FLIGHT) {
        const batch: Promise<unknown>[] = [];
        for (let j = i; j < Math.min(to, i + IN_FLIGHT); j++) batch.push(call(j));
        await Promise.all(batch);
      }
      return dump() / (to - from);
    };

    console.log(`| Call (bench shape: allowed, cost 1, ${KEYS} keys) | Redis instructions per call (FCALL) |`);
    console.log("|---|---|");
    const rlf = new RateLimiterRedis({ storeClient: redis, keyPrefix: "rlf", points: 1_000_000_000, duration: 60 });
    await run((i) => rlf.consume(`k${i % KEYS}`), 0, KEYS);
    console.log(
      `| rate-limiter-flexible consume (EVALSHA) | ${k(await run((i) => rlf.consume(`k${i % KEYS}`), 0, calls))} |`,
    );
    for (const [name, spec] of Object.entries(SPECS)) {
      const limiter = new Limiter({ store, clock, namespace: `cg-${name}` });
      const call = (i: number) => {
        clock.set(start + Math.floor(i / PER_MS));
        return limiter.check({ ...spec, key: `k${i % KEYS}` });
      };
      // warm-up: every key written, and a sliding log of 1 s filled to its steady length
      const warm = name === "sliding-log" ? 1100 * PER_MS : 2 * KEYS;
      await run(call, 0, warm);
      console.log(`| ${name} | ${k(await run(call, warm, warm + calls))} |`);
    }

    console.log("");
    console.log("| Sliding log, one key (window 100 s, max 100,000) | Entries | Redis instructions per call (FCALL) |");
    console.log("|---|---|---|");
    const WINDOW = 100_000;
    const log = { algorithm: "sliding-log", max: 100_000, windowMs: WINDOW } as const;
    const limiter = new Limiter({ store, clock, namespace: "cg-log" });
    const at = (key: string, t: number, cost = 1) => {
      clock.set(t);
      return limiter.check({ ...log, key, cost });
    };
    const sequential = async (label: string, entries: string, call: (i: number) => Promise<unknown>) => {
      dump();
      for (let i = 0; i < 1000; i++) await call(i);
      console.log(`| ${label} | ${entries} | ${k(dump() / 1000)} |`);
    };
    for (let i = 0; i < 100; i++) await at("short", start + i);
    await sequential("allowed, window sliding by 1 ms a call", "100", (i) => at("short", start + 100 + i));
    if (!fullLog) return;
    for (let from = 0; from < WINDOW - 1000; from += 2000) {
      await Promise.all(
        Array.from({ length: Math.min(2000, WINDOW - 1000 - from) }, (_, i) => {
          const t = start + from + i;
          return store.runLimit("sliding-log", keyOf("full"), limitArgs(t, { ...log, key: "full" }, 1, t));
        }),
      );
    }
    await sequential("allowed, window sliding by 1 ms a call", "99,000", (i) => at("full", start + WINDOW + i));
    await sequential("denied, cost 2,000 (full: the retry time by binary search)", "99,000", () =>
      at("full", start + WINDOW + 999, 2000),
    );
    await sequential("denied, cost 100,000 (the largest)", "99,000", () => at("full", start + WINDOW + 999, 100_000));
    await sequential("allowed, 1,000 charges in the same ms", "99,000", () => at("full", start + WINDOW + 1000));
  } finally {
    await stopCallgrindServer(child, redis, dir);
  }
}

/** The sliding log key of `name` in the probe's namespace (filled by FCALL directly, skipping validation). */
const keyOf = (name: string): string => limitKey("cg-log", "sliding-log", name);

if (isMain(import.meta))
  await main(Number(process.env.CG_PORT ?? 8470), Number(process.env.CALLS ?? 3000), process.env.FULL_LOG !== "0");
