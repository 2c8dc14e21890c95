// Installs what `npm test`, `npm run demo` and `npm run bench` need on a fresh Debian machine that has
// only Node and npm: the npm packages (npm ci), and Debian's redis-server and lua-check (luacheck, the Lua
// linter the unit tier runs) by apt-get, as root.
// Plain Node on purpose: it runs before node_modules exists.
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

function run(cmd, args) {
  console.error(`[ensure-deps] ${cmd} ${args.join(" ")}`);
  execFileSync(cmd, args, { cwd: root, stdio: ["ignore", "inherit", "inherit"] });
}

function has(command) {
  return spawnSync("sh", ["-c", `command -v ${command}`], { stdio: "ignore" }).status === 0;
}

function ensureNpmPackages() {
  const marker = join(root, "node_modules", ".package-lock.json");
  const lock = join(root, "package-lock.json");
  // npm writes node_modules/.package-lock.json on every install: older than the lock file means stale.
  if (existsSync(marker) && statSync(marker).mtimeMs >= statSync(lock).mtimeMs) return;
  run("npm", ["ci", "--no-audit", "--no-fund"]);
}

/** Each command needed and the Debian package that provides it. */
const DEBIAN_COMMANDS = [
  ["redis-server", "redis-server"],
  ["redis-cli", "redis-tools"],
  ["luacheck", "lua-check"],
];

function ensureDebianPackages() {
  const missing = [...new Set(DEBIAN_COMMANDS.filter(([command]) => !has(command)).map(([, pkg]) => pkg))];
  if (missing.length === 0) return;
  if (process.getuid?.() !== 0) {
    console.error(
      `[ensure-deps] ${missing.join(", ")} not installed and this user cannot install them.\n` +
        `Install Debian's packages as root: apt-get update && apt-get install -y ${missing.join(" ")}`,
    );
    process.exit(1);
  }
  run("apt-get", ["update", "-qq"]);
  execFileSync("apt-get", ["install", "-y", "-qq", ...missing], {
    cwd: root,
    stdio: ["ignore", "inherit", "inherit"],
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
  });
}

ensureNpmPackages();
ensureDebianPackages();
