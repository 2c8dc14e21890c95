// Installs what `npm test`, `npm run demo` and `npm run bench` need on a fresh Debian machine that has
// only Node and npm: the npm packages (npm ci), Debian's redis-server and, from bookworm-backports,
// valkey-server (apt-get, as root).
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

function requireRoot(packages) {
  if (process.getuid?.() === 0) return;
  console.error(
    `[ensure-deps] ${packages} is not installed and this user cannot install it.\n` +
      "Install Debian's package as root (README: the two commands).",
  );
  process.exit(1);
}

function aptInstall(args) {
  execFileSync("apt-get", ["install", "-y", "-qq", ...args], {
    cwd: root,
    stdio: ["ignore", "inherit", "inherit"],
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
  });
}

function ensureRedis() {
  if (has("redis-server") && has("redis-cli")) return;
  requireRoot("redis-server");
  run("apt-get", ["update", "-qq"]);
  aptInstall(["redis-server", "redis-tools"]);
}

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

// Valkey 8.0 (the engine the stack deploys) is in bookworm-backports, which a new machine does not list.
function ensureValkey() {
  if (has("valkey-server")) return;
  requireRoot("valkey-server");
  if (!hasSuite("bookworm-backports")) {
    console.error("[ensure-deps] adding Debian's bookworm-backports suite for valkey-server");
    writeFileSync(
      "/etc/apt/sources.list.d/tollgate-bookworm-backports.sources",
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
  aptInstall(["-t", "bookworm-backports", "valkey-server"]);
}

ensureNpmPackages();
ensureRedis();
ensureValkey();
