import { mkdtempSync } from "node:fs";
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
import { scatteredIds } from "./workload-ids.ts";

const T0 = Date.UTC(2026, 10, 2, 9);
const DAY = 86_400_000;
const BATCH = 10_000;

if (isMain(import.meta)) {
  const port = Number(process.env.CG_PORT ?? 7446);
  const users = Number(process.env.USERS ?? 20_000);
  const dir = mkdtempSync(join(tmpdir(), "sparse-cg-"));
  const { child, redis } = await startCallgrindServer(port, dir, ["fcallCommand"]);
  const dump = dumper(child, dir);
  try {
    await redis.function("LOAD", tollgateLibrary.code);
    const name = tollgateLibrary.functions.capSends;
    let calls = 0;
    const store: CapStore = {
      capSends: (keys, args) => {
        calls++;
        return (redis as unknown as { fcallBuffer: (...a: unknown[]) => Promise<Buffer> }).fcallBuffer(
          name,
          keys.length,
          ...keys,
          ...args,
        );
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
            { window: "1d", max: 1 },
            { window: "7d", max: 2 },
          ],
        },
      },
    });
    const capper = new Capper({ store, rules: () => ({ policy, segments: new SegmentIndex([]) }), clock });
    const ids = scatteredIds(users, 2 ** 31, 7);
    const batches = Array.from({ length: Math.ceil(ids.length / BATCH) }, (_, b) =>
      ids.slice(b * BATCH, (b + 1) * BATCH),
    );
    dump();
    for (let day = 0; day < 2; day++) {
      clock.set(T0 + day * DAY);
      calls = 0;
      await Promise.all(
        batches.map((userIds) => capper.capBatch({ campaignId: `sparse-${day}`, channel: "push", userIds })),
      );
      const total = dump();
      console.log(
        `campaign ${day + 1}: ${(total / ids.length / 1000).toFixed(1)}k instructions per decision, ${calls} calls (${(total / calls / 1000).toFixed(0)}k per call)`,
      );
    }
  } finally {
    await stopCallgrindServer(child, redis, dir);
  }
}
