// Installs what `npm test`, `npm run demo` and `npm run bench` need on a fresh Debian machine that has
// only Node and npm: the npm packages (npm ci), and by apt-get, as root, Debian's redis-server, lua-check
// (luacheck, the Lua linter the unit tier runs), faketime (libfaketime), chromium (the console's browser tests
// drive it with playwright-core) and, from bookworm-backports, valkey-server.
// Plain Node on purpose: it runs before node_modules exists.
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
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

/** Each command needed, the Debian package that provides it, and the suite it comes from. */
const DEBIAN_COMMANDS = [
  ["redis-server", "redis-server", "bookworm"],
  ["redis-cli", "redis-tools", "bookworm"],
  ["luacheck", "lua-check", "bookworm"],
  // libfaketime: the chaos harness steps and skews one SDK instance's clock (and test:shifted uses it)
  ["faketime", "faketime", "bookworm"],
  // the browser the console's tests drive (playwright-core launches it; it downloads no browser of its own)
  ["chromium", "chromium", "bookworm"],
  // Valkey 8.0, the engine the stack deploys, is in bookworm-backports
  ["valkey-server", "valkey-server", "bookworm-backports"],
];
const BACKPORTS_SOURCE = "/etc/apt/sources.list.d/tollgate-bookworm-backports.sources";

/** True when some APT source already lists the suite. */
function hasSuite(suite) {
  const files = ["/etc/apt/sources.list"];
  const dir = "/etc/apt/sources.list.d";
  if (existsSync(dir)) files.push(...readdirSync(dir).map((name) => join(dir, name)));
  return files.some((file) => {
    if (!/\.(list|sources)$/.test(file) || !existsSync(file)) return false;
    return readFileSync(file, "utf8")
      .split("\n")
      .some((line) => !line.trimStart().startsWith("#") && new RegExp(`\\b${suite}\\b`).test(line));
  });
}

function ensureDebianPackages() {
  const missing = DEBIAN_COMMANDS.filter(([command]) => !has(command));
  if (missing.length === 0) return;
  const names = [...new Set(missing.map(([, pkg]) => pkg))];
  if (process.getuid?.() !== 0) {
    console.error(
      `[ensure-deps] ${names.join(", ")} not installed and this user cannot install them.\n` +
        `Install Debian's packages as root: apt-get update && apt-get install -y ${names.join(" ")}` +
        " (valkey-server from bookworm-backports)",
    );
    process.exit(1);
  }
  if (missing.some(([, , suite]) => suite === "bookworm-backports") && !hasSuite("bookworm-backports")) {
    console.error("[ensure-deps] adding Debian's bookworm-backports suite for valkey-server");
    writeFileSync(
      BACKPORTS_SOURCE,
      [
        "Types: deb",
        "URIs: http://deb.debian.org/debian",
        "Suites: bookworm-backports",
        "Components: main",
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg",
        "",
      ].join("\n"),
    );
  }
  run("apt-get", ["update", "-qq"]);
  for (const suite of ["bookworm", "bookworm-backports"]) {
    const packages = [...new Set(missing.filter(([, , from]) => from === suite).map(([, pkg]) => pkg))];
    if (packages.length === 0) continue;
    execFileSync("apt-get", ["install", "-y", "-qq", ...(suite === "bookworm" ? [] : ["-t", suite]), ...packages], {
      cwd: root,
      stdio: ["ignore", "inherit", "inherit"],
      env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
    });
  }
}

ensureNpmPackages();
ensureDebianPackages();
