// Instructions a standalone redis-server executes inside the quota-sync chunk (callgrind, counted only within
// EVALSHA and FCALL), per call and per key: a figure the machine's load does not change. Usage:
//   QUOTA_PORT=7745 [ROUNDS=50] [SHAPES=0,1] [ONLY=FCALL] npx tsx scripts/bench/quota-sync-instructions.ts [script.lua ...]   (needs valgrind)
// Each script given (an entry file, joined with its parts; default lua/quota-sync/quota-sync.lua) runs the shapes of quota-sync-cpu.ts on its own server,
// as a Redis Function (FCALL, as the check API's store calls it) and as an EVAL script (EVALSHA, as the
// SDK's direct transport calls it). A script whose time is the store's clock (a `store-now` part) runs its
// test build, the clock set to each round's simulated time before its calls (outside the count; inside it,
// one GET per call more than the service's build), so the count does not follow how fast valgrind runs.
import { execFileSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ruleWriteCall } from "../../functions/core/quotas/quota-rule-script.ts";
import {
  defineLibrary,
  encodeSync,
  evalScriptOf,
  joinLua,
  readLuaChunk,
  slotGroupTestClockKey,
} from "../../sdk/src/protocol/index.ts";
import { TEST_CLOCK_PARTS } from "../../test/support/quota-test-clock.ts";
import { isMain } from "../is-main.ts";
import { dumpTotal, startCallgrindServer, stopCallgrindServer } from "./callgrind-server.ts";
import { SYNC_SHAPES, type SyncShape, syncRound } from "./quota-sync-cpu.ts";

const T0 = Date.UTC(2026, 10, 2, 9);
const WARM_ROUNDS = 20;

/** Instructions per call of one shape: `rounds` rounds of 4 instances after a warm-up. */
async function countShape(
  port: number,
  chunk: string,
  how: "FCALL" | "EVALSHA",
  shape: SyncShape,
  rounds: number,
): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), "quota-cg-"));
  const { child, redis } = await startCallgrindServer(port, dir, ["evalGenericCommand", "fcallCommand"]);
  try {
    const library = defineLibrary({ quotaSync: chunk });
    await redis.function("LOAD", library.code);
    const sha = (await redis.script("LOAD", evalScriptOf(chunk))) as string;
    const call = (keys: string[], args: Array<string | number | Buffer>) =>
      how === "FCALL"
        ? redis.fcall(library.functions.quotaSync, keys.length, ...keys, ...args)
        : redis.evalsha(sha, keys.length, ...keys, ...args);
    const write = ruleWriteCall({ namespace: "cg", name: "api", group: 0, rule: shape.rule, version: "v1", stamp: 1 });
    await redis.eval(
      readLuaChunk([new URL("../../lua/", import.meta.url)], "quota-rule"),
      1,
      ...write.keys,
      ...write.args,
    );
    const run = async (from: number, to: number) => {
      for (let round = from; round <= to; round++) {
        await redis.set(slotGroupTestClockKey("cg", "api", 0), String(T0 + round * 50));
        for (const request of syncRound(shape, round, T0 + round * 50)) {
          const { keys, args } = encodeSync("cg", request, T0 + round * 50);
          await call(keys, args);
        }
      }
    };
    await run(1, WARM_ROUNDS);
    execFileSync("callgrind_control", ["--dump=warm", String(child.pid)], { stdio: "ignore" });
    await run(WARM_ROUNDS + 1, WARM_ROUNDS + rounds);
    execFileSync("callgrind_control", ["--dump=measured", String(child.pid)], { stdio: "ignore" });
    return dumpTotal(dir, ".2") / (rounds * 4);
  } finally {
    await stopCallgrindServer(child, redis, dir, `callgrind dumps of ${shape.name} × ${shape.keysPerCall}`);
  }
}

if (isMain(import.meta)) {
  const port = Number(process.env.QUOTA_PORT ?? 7745);
  const rounds = Number(process.env.ROUNDS ?? 50);
  // SHAPES=0,1: only those rows of SYNC_SHAPES
  const only = process.env.SHAPES?.split(",").map(Number);
  const scripts = process.argv.length > 2 ? process.argv.slice(2) : ["lua/quota-sync/quota-sync.lua"];
  const ways = (["FCALL", "EVALSHA"] as const).filter((way) => !process.env.ONLY || process.env.ONLY === way);
  console.log(
    "| Script | Called by | Rule | Keys per call | Instructions per call | per key in the call | per key over the 1-key call |",
  );
  console.log("|---|---|---|---|---|---|---|");
  for (const path of scripts) {
    const chunk = joinLua(path, { parts: TEST_CLOCK_PARTS }).text;
    for (const how of ways) {
      const perCall = new Map<string, number>();
      for (const [index, shape] of SYNC_SHAPES.entries()) {
        if (only && !only.includes(index)) continue;
        const ir = await countShape(port, chunk, how, shape, rounds);
        const single = perCall.get(shape.name);
        if (shape.keysPerCall === 1) perCall.set(shape.name, ir);
        const over = single === undefined ? "—" : ((ir - single) / (shape.keysPerCall - 1)).toFixed(0);
        console.log(
          `| ${path} | ${how} | ${shape.name} | ${shape.keysPerCall} | ${ir.toFixed(0)} | ${(ir / shape.keysPerCall).toFixed(0)} | ${over} |`,
        );
      }
    }
  }
}
