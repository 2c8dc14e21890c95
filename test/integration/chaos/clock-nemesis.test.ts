// The chaos harness's clock nemesis: a process under libfaketime has its wall clock moved by the offset file,
// while its reference clock (process.hrtime, CLOCK_MONOTONIC) stays the harness's.
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { faketimeEnv, setClockOffset } from "../../../scripts/chaos/instances.ts";

const run = promisify(execFile);
const dir = mkdtempSync(join(tmpdir(), "tollgate-chaos-clock-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * A child under libfaketime with the offset `ms` reads both its clocks at once: its wall clock less its
 * monotonic clock (what the offset moves), and whether its monotonic read fell between the harness's own
 * reads before and after the child ran (one clock for both).
 */
async function clocksOfChild(ms: number): Promise<{ wallLessMonotonic: number; sameMonotonic: boolean }> {
  const file = join(dir, `clock${ms}.txt`);
  setClockOffset(file, ms);
  const before = process.hrtime.bigint();
  const { stdout } = await run(process.execPath, ["-e", "console.log(Date.now(), String(process.hrtime.bigint()))"], {
    env: { ...process.env, ...faketimeEnv(file) },
  });
  const after = process.hrtime.bigint();
  const [wall, monotonic] = stdout.trim().split(" ");
  const child = BigInt(monotonic as string);
  return {
    wallLessMonotonic: Number(wall) - Number(child / 1_000_000n),
    sameMonotonic: child > before && child < after,
  };
}

describe("chaos clock nemesis (libfaketime)", () => {
  it("moves a child's wall clock by the file's offset, either way, and never its monotonic clock", async () => {
    const base = await clocksOfChild(0);
    const ahead = await clocksOfChild(2000);
    const behind = await clocksOfChild(-1000);
    // a child reads its two clocks within a few ms of each other (200: a loaded machine may preempt it between)
    expect(Math.abs(ahead.wallLessMonotonic - base.wallLessMonotonic - 2000)).toBeLessThan(200);
    expect(Math.abs(behind.wallLessMonotonic - base.wallLessMonotonic + 1000)).toBeLessThan(200);
    expect([base.sameMonotonic, ahead.sameMonotonic, behind.sameMonotonic]).toEqual([true, true, true]);
  });
});
