// The Lambda lifecycle: a middy handler with the SDK, in a child process standing in for an execution
// environment. Each invocation syncs at its boundary and returns; no timer outlives it; and the process
// ends by itself afterwards, so the SDK left no open handle (a pending one would keep it alive).
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { expect, it } from "vitest";

const run = promisify(execFile);

it("every invocation returns, syncs at its boundary, leaves no timer, and the environment can end", async () => {
  const child = new URL("../support/lambda-child.ts", import.meta.url).pathname;
  // the promise settles only when the child exits: an SDK handle left open would hang it (the test times out)
  const { stdout } = await run(process.execPath, ["--import", "tsx", child], { timeout: 30_000 });
  const seen = JSON.parse(stdout.trim().split("\n").at(-1) ?? "{}");
  expect(seen.syncs).toBe(3);
  expect(seen.results.map((r: { status: number }) => r.status)).toEqual([200, 200, 200]);
  for (const r of seen.results) expect(r.timersAfter).toBe(seen.timersBefore);
});
