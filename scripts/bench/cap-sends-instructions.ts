import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Redis } from "ioredis";
import { load, tollgateLibrary } from "../../functions/adapters/lua-scripts.ts";
import type { CapStore } from "../../functions/core/capping/cap-sends-script.ts";
import { Capper } from "../../functions/core/capping/capper.ts";
import { parsePolicy } from "../../functions/core/capping/policy.ts";
import { SegmentIndex } from "../../functions/core/capping/segment-index.ts";
import { fixedClock } from "../../functions/core/shared/clock.ts";
import { evalScriptOf, joinLua } from "../../sdk/src/protocol/index.ts";
import { isMain } from "../is-main.ts";
import { dumper, startCallgrindServer, stopCallgrindServer } from "./callgrind-server.ts";

const T0 = Date.UTC(2026, 10, 2, 9);
const DAY = 86_400_000;

/** ioredis defines the Buffer-reply variants of EVALSHA and FCALL without typings. */
type BufferScripts = {
  [command in "fcallBuffer" | "evalshaBuffer"]: (
    name: string,
    keys: number,
    ...rest: (string | Buffer)[]
  ) => Promise<Buffer>;
};

/** A CapStore over one standalone server: the script by EVALSHA, or the library's function by FCALL. */
async function storeOn(redis: Redis, how: { evalLua: string } | "function"): Promise<CapStore> {
  if (how === "function") {
    await redis.function("LOAD", tollgateLibrary.code);
    const name = tollgateLibrary.functions.capSends;
    return {
      capSends: (keys, args) => (redis as unknown as BufferScripts).fcallBuffer(name, keys.length, ...keys, ...args),
    };
  }
  const sha = (await redis.script("LOAD", how.evalLua)) as string;
  return {
    capSends: (keys, args) => (redis as unknown as BufferScripts).evalshaBuffer(sha, keys.length, ...keys, ...args),
  };
}

interface Counts {
  check: number;
  dense: number[];
}

async function count(port: number, how: { evalLua: string } | "function", checks: number, batches: number) {
  const dir = mkdtempSync(join(tmpdir(), "cap-sends-cg-"));
  const { child, redis } = await startCallgrindServer(port, dir, ["evalShaCommand", "fcallCommand"]);
  const dump = dumper(child, dir);
  try {
    const store = await storeOn(redis, how);
    const clock = fixedClock(T0);
    const policy = parsePolicy({
      version: "cg",
      channels: ["push"],
      segments: [],
      default: { name: "everyone", caps: { push: [{ window: "1d", max: 10_000 }] } },
    });
    const capper = new Capper({ store, rules: () => ({ policy, segments: new SegmentIndex([]) }), clock });
    const check = (i: number) => capper.checkUser({ userId: 512_000 + (i & 255), channel: "push" });
    for (let i = 0; i < 600; i++) await check(i);
    dump();
    for (let i = 600; i < 600 + checks; i++) await check(i);
    const counts: Counts = { check: dump() / checks, dense: [] };
    for (let day = 0; day < 3; day++) {
      clock.set(T0 + day * DAY);
      for (let batch = 0; batch < batches; batch++) {
        const first = 1_048_576 + batch * 1_024;
        const userIds = Array.from({ length: 1_024 }, (_, i) => first + i);
        await capper.capBatch({ campaignId: `campaign-${day}`, channel: "push", userIds, at: T0 + day * DAY });
      }
      counts.dense.push(dump() / batches);
    }
    return counts;
  } finally {
    await stopCallgrindServer(child, redis, dir);
  }
}

if (isMain(import.meta)) {
  const port = Number(process.env.CG_PORT ?? 7445);
  const checks = Number(process.env.CHECKS ?? 512);
  const batches = Number(process.env.BATCHES ?? 8);
  const chunk = load("cap-sends");
  const runs: [string, { evalLua: string } | "function"][] = [
    ["this cap-sends.lua, EVALSHA", { evalLua: evalScriptOf(chunk) }],
    ["this cap-sends.lua, FCALL", "function"],
  ];
  const old = process.argv[2];
  if (old) runs.unshift([`${old}, EVALSHA`, { evalLua: joinLua(old).text }]);
  // ONLY=FCALL: only the rows whose name holds it
  if (process.env.ONLY) runs.splice(0, runs.length, ...runs.filter(([name]) => name.includes(process.env.ONLY ?? "")));
  const k = (ir: number) => `${(ir / 1000).toFixed(1)}k`;
  console.log("| Script, call | per `/v1/frequency` check | per dense 1,024-user call, campaign 1 / 2 / 3 |");
  console.log("|---|---:|---:|");
  const results = await Promise.all(runs.map(([, how], i) => count(port + i, how, checks, batches)));
  for (const [i, [name]] of runs.entries()) {
    const { check, dense } = results[i] as Counts;
    console.log(`| ${name} | ${k(check)} | ${dense.map(k).join(" / ")} |`);
  }
}
