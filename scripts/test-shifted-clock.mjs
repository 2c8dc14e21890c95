// Runs the suite with this machine's clock shifted for the test processes only (libfaketime, Debian's
// `faketime` package), to show that no test depends on the date it runs on. The Redis servers and tools
// keep the real clock: they are reached through wrappers, first on PATH, that drop the preload.
//
//   node scripts/test-shifted-clock.mjs +365d [vitest args]     (or -365d; any libfaketime offset)
// Plain Node: it installs the package (apt-get, as root) when it is missing.
import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const [offset, ...vitestArgs] = process.argv.slice(2);
if (!offset || !/^[+-]\d+[smhdy]?$/.test(offset)) {
  console.error("usage: node scripts/test-shifted-clock.mjs +365d|-365d [vitest args]");
  process.exit(2);
}
const LIBRARY = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
if (!existsSync(LIBRARY)) {
  if (process.getuid?.() !== 0) {
    console.error(`[shifted-clock] ${LIBRARY} is missing: apt-get install -y faketime (as root)`);
    process.exit(1);
  }
  execFileSync("apt-get", ["install", "-y", "-qq", "faketime"], {
    stdio: ["ignore", "inherit", "inherit"],
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
  });
}
const realClock = mkdtempSync(join(tmpdir(), "tollgate-real-clock-"));
for (const tool of ["redis-server", "redis-cli", "redis-benchmark"]) {
  const real = execFileSync("sh", ["-c", `command -v ${tool} || true`], { encoding: "utf8" }).trim();
  if (!real) continue;
  const wrapper = join(realClock, tool);
  writeFileSync(wrapper, `#!/bin/sh\nexec env -u LD_PRELOAD -u FAKETIME -u DONT_FAKE_MONOTONIC ${real} "$@"\n`);
  chmodSync(wrapper, 0o755);
}
// npm's cache locks do not hold under a shifted clock ("Lock compromised"): Node 24 for the bundle tests is
// fetched now, on the real clock, and named to them (test/support/node24.ts)
const node24 = execFileSync("npx", ["--yes", "-p", "node@24", "node", "-p", "process.execPath"], {
  cwd: root,
  encoding: "utf8",
  stdio: ["ignore", "pipe", "inherit"],
}).trim();
const env = {
  ...process.env,
  TOLLGATE_NODE24: node24,
  PATH: `${realClock}:${process.env.PATH ?? ""}`,
  LD_PRELOAD: LIBRARY,
  FAKETIME: offset,
  // timers and performance.now() keep running at the machine's pace: only the calendar moves
  DONT_FAKE_MONOTONIC: "1",
};
const probe = spawnSync(process.execPath, ["-p", "new Date().toISOString()"], { env, encoding: "utf8" });
console.error(
  `[shifted-clock] the test processes' clock reads ${probe.stdout.trim()} (real: ${new Date().toISOString()})`,
);
const vitest = join(root, "node_modules", "vitest", "vitest.mjs");
const result = spawnSync(process.execPath, [vitest, "run", ...vitestArgs], { cwd: root, stdio: "inherit", env });
rmSync(realClock, { recursive: true, force: true });
process.exit(result.status ?? 1);
