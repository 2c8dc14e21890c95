// The busy week (30 campaigns, each to a random half of consecutive users; caps 10/1d, 30/7d) on a standalone
// redis-server under callgrind: instructions per call of the late week, where pages' histories have diverged
// (a class per user), independent of the machine's load. With PHASES=1, the late week's instructions by the C
// functions they were spent in (msgpack, GC, string building, pattern matching), from callgrind_annotate.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { tollgateLibrary } from "../../functions/adapters/lua-scripts.ts";
import type { CapStore } from "../../functions/core/capping/cap-sends-script.ts";
import { Capper } from "../../functions/core/capping/capper.ts";
import { parsePolicy } from "../../functions/core/capping/policy.ts";
import { SegmentIndex } from "../../functions/core/capping/segment-index.ts";
import { fixedClock } from "../../functions/core/shared/clock.ts";
import { isMain } from "../is-main.ts";
import { dumper, startCallgrindServer, stopCallgrindServer } from "./callgrind-server.ts";
import { weekHalf } from "./workload-ids.ts";

const T0 = Date.UTC(2026, 10, 2, 9);
const DAY = 86_400_000;
const BATCH = 10_000;
const CAMPAIGNS = 30;

/**
 * C functions whose inclusive instructions show where a call's time goes (Debian's redis-server is stripped:
 * only its exported functions have names, not the Lua VM's own, so the rest is the interpreter).
 */
const PHASES: [string, RegExp][] = [
  ["msgpack unpack (the block read)", /^mp_unpack_full$/],
  ["msgpack pack (the block written)", /^mp_pack$/],
  ["strings made in C (unpack, sub, char, gsub, concat; GC steps they start)", /^lua_pushlstring$/],
  ["allocator free", /^free$/],
  ["allocator realloc", /^realloc$/],
  ["redis.call replies", /^parseReply$/],
];

/** Inclusive instructions of each phase in the dumps `files` (summed), from callgrind_annotate. */
function phasesOf(files: string[]): Map<string, number> {
  const totals = new Map<string, number>();
  for (const file of files) {
    const text = execFileSync("callgrind_annotate", ["--inclusive=yes", "--threshold=100", file], {
      encoding: "utf8",
      maxBuffer: 1 << 26,
    });
    for (const line of text.split("\n")) {
      // "  378,357 ( 8.13%)  ???:mp_unpack_full [/usr/bin/redis-server]"
      const match = /^\s*([\d,]+)\s+\([^)]*\)\s+[^:]*:(\S+)/.exec(line);
      if (!match) continue;
      const name = match[2] as string;
      for (const [phase, pattern] of PHASES) {
        if (pattern.test(name))
          totals.set(phase, (totals.get(phase) ?? 0) + Number((match[1] as string).replace(/,/g, "")));
      }
    }
  }
  return totals;
}

if (isMain(import.meta)) {
  const port = Number(process.env.CG_PORT ?? 8246);
  const users = Number(process.env.USERS ?? 16_384);
  // the campaigns whose calls are counted one by one (the late week)
  const lateFrom = Number(process.env.LATE_FROM ?? 26);
  const dir = mkdtempSync(join(tmpdir(), "week-cg-"));
  const { child, redis } = await startCallgrindServer(port, dir, ["fcallCommand"]);
  const dump = dumper(child, dir);
  try {
    await redis.function("LOAD", tollgateLibrary.code);
    const name = tollgateLibrary.functions.capSends;
    const fcall = (keys: readonly string[], args: readonly (string | Buffer)[]) =>
      (redis as unknown as { fcallBuffer: (...a: unknown[]) => Promise<Buffer> }).fcallBuffer(
        name,
        keys.length,
        ...keys,
        ...args,
      );
    // late-week calls run one at a time, each dumped on its own
    let perCall: number[] | null = null;
    let queue: Promise<unknown> = Promise.resolve();
    let calls = 0;
    const store: CapStore = {
      capSends: (keys, args) => {
        calls++;
        if (perCall === null) return fcall(keys, args);
        const counted = perCall;
        const run = queue.then(async () => {
          const reply = await fcall(keys, args);
          counted.push(dump());
          return reply;
        });
        queue = run.catch(() => undefined);
        return run;
      },
    };
    const clock = fixedClock(T0);
    const policy = parsePolicy({
      version: "cg",
      channels: ["push"],
      segments: [],
      default: {
        name: "everyone",
        caps: {
          push: [
            { window: "1d", max: 10 },
            { window: "7d", max: 30 },
          ],
        },
      },
    });
    const capper = new Capper({ store, rules: () => ({ policy, segments: new SegmentIndex([]) }), clock });
    const k = (ir: number) => `${(ir / 1000).toFixed(0)}k`;
    dump();
    const late: number[] = [];
    for (let campaign = 0; campaign < CAMPAIGNS; campaign++) {
      clock.set(T0 + Math.floor((campaign * 7 * DAY) / CAMPAIGNS));
      const ids = weekHalf(users, campaign);
      calls = 0;
      if (campaign >= lateFrom) perCall = [];
      await Promise.all(
        Array.from({ length: Math.ceil(ids.length / BATCH) }, (_, b) => ids.slice(b * BATCH, (b + 1) * BATCH)).map(
          (userIds) => capper.capBatch({ campaignId: `week-${campaign}`, channel: "push", userIds }),
        ),
      );
      if (perCall === null) {
        const total = dump();
        if (campaign % 5 === 4) console.log(`campaign ${campaign + 1}: ${calls} calls, ${k(total / calls)} per call`);
      } else {
        const sorted = [...perCall].sort((a, b) => a - b);
        late.push(...perCall);
        console.log(
          `campaign ${campaign + 1}: ${calls} calls, per call median ${k(sorted[Math.floor(sorted.length / 2)] ?? 0)}, max ${k(sorted.at(-1) ?? 0)}`,
        );
      }
    }
    const sorted = [...late].sort((a, b) => a - b);
    const mean = late.reduce((sum, ir) => sum + ir, 0) / late.length;
    console.log(
      `late week (campaigns ${lateFrom + 1}-${CAMPAIGNS}, ${late.length} calls): mean ${k(mean)}, median ${k(sorted[Math.floor(sorted.length / 2)] ?? 0)}, p90 ${k(sorted[Math.floor(sorted.length * 0.9)] ?? 0)}, max ${k(sorted.at(-1) ?? 0)} instructions per call`,
    );
    if (process.env.PHASES) {
      // dumps 1 (before the week) and 2..lateFrom + 1 (a campaign each) come before the late week's
      const files = readdirSync(dir)
        .filter((file) => Number(/\.(\d+)$/.exec(file)?.[1] ?? 0) > lateFrom + 1)
        .map((file) => join(dir, file));
      const phases = phasesOf(files);
      for (const [phase] of PHASES) {
        console.log(`  ${phase}: ${k((phases.get(phase) ?? 0) / late.length)} per call (inclusive)`);
      }
    }
  } finally {
    await stopCallgrindServer(child, redis, dir);
  }
}
