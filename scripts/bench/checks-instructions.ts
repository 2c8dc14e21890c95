// The checks workload of the bench (256 users × 260 anonymous checks at 2 per 1m, each round's 256 checks
// pipelined) on a standalone redis-server under callgrind: instructions per round, load-independent. A call
// doing much more work than the others (a block's compaction) shows as its round's excess over the mean
// round, where the bench's slowest-script figure mixes the work with the machine's scheduling.
// CG_PORT (7448), ROUNDS (260).
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Redis } from "ioredis";
import { tollgateLibrary } from "../../functions/adapters/lua-scripts.ts";
import type { CapStore } from "../../functions/core/capping/cap-sends-script.ts";
import { Capper } from "../../functions/core/capping/capper.ts";
import { parsePolicy } from "../../functions/core/capping/policy.ts";
import { SegmentIndex } from "../../functions/core/capping/segment-index.ts";
import { fixedClock } from "../../functions/core/shared/clock.ts";
import { isMain } from "../is-main.ts";
import { dumper, startCallgrindServer, stopCallgrindServer } from "./callgrind-server.ts";

const T0 = Date.UTC(2026, 10, 2, 9);

/** ioredis defines the Buffer-reply variant of FCALL without typings. */
type BufferFcall = { fcallBuffer: (name: string, keys: number, ...rest: (string | Buffer)[]) => Promise<Buffer> };

async function main(port: number, rounds: number) {
  const dir = mkdtempSync(join(tmpdir(), "checks-cg-"));
  const { child, redis } = await startCallgrindServer(port, dir, ["fcallCommand"]);
  const dump = dumper(child, dir);
  try {
    await redis.function("LOAD", tollgateLibrary.code);
    const name = tollgateLibrary.functions.capSends;
    const store: CapStore = {
      capSends: (keys, args) => (redis as Redis & BufferFcall).fcallBuffer(name, keys.length, ...keys, ...args),
    };
    const clock = fixedClock(T0);
    const policy = parsePolicy({
      version: "cg",
      channels: ["push"],
      segments: [],
      default: { name: "everyone", caps: { push: [{ window: "1m", max: 2 }] } },
    });
    const capper = new Capper({ store, rules: () => ({ policy, segments: new SegmentIndex([]) }), clock });
    dump();
    const perRound: number[] = [];
    for (let round = 0; round < rounds; round++) {
      clock.set(T0 + round * 250);
      await Promise.all(Array.from({ length: 256 }, (_, userId) => capper.checkUser({ userId, channel: "push" })));
      perRound.push(dump());
    }
    const k = (instructions: number) => `${(instructions / 1000).toFixed(0)}k`;
    const mean = perRound.reduce((a, b) => a + b, 0) / perRound.length;
    const top = perRound.map((total, round) => [total, round] as const).sort((a, b) => b[0] - a[0]);
    console.log(`${rounds} rounds of 256 checks: mean call ${k(mean / 256)} instructions`);
    console.log(
      `heaviest rounds (mean call; the round's excess over the mean round): ${top
        .slice(0, 5)
        .map(([total, round]) => `round ${round} ${k(total / 256)} (+${k(total - mean)})`)
        .join(", ")}`,
    );
  } finally {
    await stopCallgrindServer(child, redis, dir);
  }
}

if (isMain(import.meta)) await main(Number(process.env.CG_PORT ?? 7448), Number(process.env.ROUNDS ?? 260));
