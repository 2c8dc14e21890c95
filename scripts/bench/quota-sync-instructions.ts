// Instructions a standalone redis-server executes inside lua/quota-sync.lua (callgrind, counted only within
// evalGenericCommand), per call and per key: a figure the machine's load does not change. Usage:
//   QUOTA_PORT=7745 [ROUNDS=50] [SHAPES=0,1] npx tsx scripts/bench/quota-sync-instructions.ts [script.lua ...]   (needs valgrind)
// Each script given (default lua/quota-sync.lua) runs the shapes of quota-sync-cpu.ts on its own server.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ruleWriteCall } from "../../functions/core/quotas/quota-rule-script.ts";
import { encodeSync } from "../../sdk/src/wire.ts";
import { isMain } from "../is-main.ts";
import { dumpTotal, startCallgrindServer, stopCallgrindServer } from "./callgrind-server.ts";
import { SYNC_SHAPES, type SyncShape, syncRound } from "./quota-sync-cpu.ts";

const T0 = Date.UTC(2026, 10, 2, 9);
const WARM_ROUNDS = 20;

/** Instructions per call of one shape: `rounds` rounds of 4 instances after a warm-up. */
async function countShape(port: number, lua: string, shape: SyncShape, rounds: number): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), "quota-cg-"));
  const { child, redis } = await startCallgrindServer(port, dir, ["evalGenericCommand"]);
  try {
    const sha = (await redis.script("LOAD", lua)) as string;
    const write = ruleWriteCall({ namespace: "cg", name: "api", group: 0, rule: shape.rule, version: "v1", stamp: 1 });
    await redis.eval(
      readFileSync(new URL("../../lua/quota-rule.lua", import.meta.url), "utf8"),
      1,
      ...write.keys,
      ...write.args,
    );
    const run = async (from: number, to: number) => {
      for (let round = from; round <= to; round++) {
        for (const request of syncRound(shape, round, T0 + round * 50)) {
          const { keys, args } = encodeSync("cg", request, T0 + round * 50);
          await redis.evalsha(sha, keys.length, ...keys, ...args);
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
  const scripts = process.argv.length > 2 ? process.argv.slice(2) : ["lua/quota-sync.lua"];
  console.log("| Script | Rule | Keys per call | Instructions per call | per key (over the 1-key call) |");
  console.log("|---|---|---|---|---|");
  for (const path of scripts) {
    const lua = readFileSync(path, "utf8");
    const perCall = new Map<string, number>();
    for (const [index, shape] of SYNC_SHAPES.entries()) {
      if (only && !only.includes(index)) continue;
      const ir = await countShape(port, lua, shape, rounds);
      const single = perCall.get(shape.name);
      if (shape.keysPerCall === 1) perCall.set(shape.name, ir);
      const perKey = single === undefined ? "—" : ((ir - single) / (shape.keysPerCall - 1)).toFixed(0);
      console.log(`| ${path} | ${shape.name} | ${shape.keysPerCall} | ${ir.toFixed(0)} | ${perKey} |`);
    }
  }
}
